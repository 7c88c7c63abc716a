//go:build !linux

package main

import "time"

// raiseOpenFileLimit does nothing outside Linux; it returns 0 (unknown).
func raiseOpenFileLimit(uint64) uint64 { return 0 }

// processCPU is not available outside Linux.
func processCPU(int) (time.Duration, bool) { return 0, false }

// selfCPU is not available outside Linux.
func selfCPU() (time.Duration, bool) { return 0, false }

// loadAverage is not available outside Linux.
func loadAverage() (float64, bool) { return 0, false }
