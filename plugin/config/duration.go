package config

import "time"

// parseDuration is time.ParseDuration without its error values: the same
// syntax ([-+]?([0-9]*(\.[0-9]*)?unit)+, units ns, us, µs, μs, ms, s, m,
// h, or a bare "0"), the same arithmetic (a fraction through float64, as
// there) and the same overflow checks, so it accepts exactly the strings
// ParseDuration accepts with the same values (TestParseDurationIsTime).
// ParseDuration's unit map, error type and quoting weigh about 8 KB of
// module, which every Envoy compiles.
func parseDuration(s string) (time.Duration, bool) {
	var d uint64
	neg := false
	if s != "" && (s[0] == '-' || s[0] == '+') {
		neg, s = s[0] == '-', s[1:]
	}
	if s == "0" {
		return 0, true
	}
	if s == "" {
		return 0, false
	}
	for s != "" {
		v, ok := durationTerm(&s)
		if !ok {
			return 0, false
		}
		d += v
		if d > 1<<63 {
			return 0, false
		}
	}
	if neg {
		return -time.Duration(d), true
	}
	return time.Duration(d), d <= 1<<63-1
}

// durationTerm consumes one number and its unit from *s and returns their
// nanoseconds, as one turn of ParseDuration's loop.
func durationTerm(s *string) (uint64, bool) {
	t := *s
	if !(t[0] == '.' || '0' <= t[0] && t[0] <= '9') {
		return 0, false
	}
	var v, f uint64 // integers before and after the decimal point
	scale := 1.0    // value = v + f/scale
	i := 0
	for ; i < len(t) && '0' <= t[i] && t[i] <= '9'; i++ {
		if v > 1<<63/10 {
			return 0, false
		}
		if v = v*10 + uint64(t[i]-'0'); v > 1<<63 {
			return 0, false
		}
	}
	pre, post := i > 0, false
	t = t[i:]
	if t != "" && t[0] == '.' {
		overflow := false
		for i = 1; i < len(t) && '0' <= t[i] && t[i] <= '9'; i++ {
			if y := f*10 + uint64(t[i]-'0'); !overflow && f <= (1<<63-1)/10 && y <= 1<<63 {
				f, scale = y, scale*10
			} else {
				overflow = true // further digits add no precision
			}
		}
		post, t = i > 1, t[i:]
	}
	if !pre && !post {
		return 0, false
	}
	i = 0
	for i < len(t) && t[i] != '.' && (t[i] < '0' || t[i] > '9') {
		i++
	}
	unit := durationUnit(t[:i])
	*s = t[i:]
	if unit == 0 || v > 1<<63/unit {
		return 0, false
	}
	v *= unit
	if f > 0 {
		// As ParseDuration: float64 is nanosecond-accurate for fractions of hours.
		if v += uint64(float64(f) * (float64(unit) / scale)); v > 1<<63 {
			return 0, false
		}
	}
	return v, true
}

// durationUnit is the nanoseconds of a unit of ParseDuration, 0 if u is none.
func durationUnit(u string) uint64 {
	switch u {
	case "ns":
		return uint64(time.Nanosecond)
	case "us", "µs", "μs": // U+00B5 micro sign, U+03BC Greek mu
		return uint64(time.Microsecond)
	case "ms":
		return uint64(time.Millisecond)
	case "s":
		return uint64(time.Second)
	case "m":
		return uint64(time.Minute)
	case "h":
		return uint64(time.Hour)
	}
	return 0
}
