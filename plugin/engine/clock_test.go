package engine

import "time"

// wallClock is the clock of tests that decide at times they pass to
// Decide and need the engine's own clock (answers to calls, the tick) only
// to be a clock.
func wallClock() int64 { return time.Now().UnixNano() }
