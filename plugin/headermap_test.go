package main

import "testing"

func TestHeaderFields(t *testing.T) {
	m := appendHeaderMap(nil, [][2]string{
		{":path", "/"}, {"x-api-key", "first"}, {"accept", "*/*"}, {"X-Dup", "a"}, {"x-dup", "b"}, {"x-dup", "c"}, {"x-empty", ""},
	})
	for _, c := range []struct {
		name  string
		first string
		n     int
	}{
		{"x-api-key", "first", 1},
		{"X-API-KEY", "first", 1},
		{"x-dup", "a", 2},
		{"x-empty", "", 1},
		{"x-none", "", 0},
		{":path", "/", 1},
		{"x-api-ke", "", 0},
	} {
		if first, n := headerFields(m, c.name); first != c.first || n != c.n {
			t.Errorf("%s: (%q, %d), want (%q, %d)", c.name, first, n, c.first, c.n)
		}
	}
	// Empty and malformed maps: no header.
	for _, b := range [][]byte{nil, {0, 0, 0, 0}, {1, 0, 0, 0}, {255, 255, 255, 255, 0, 0, 0, 0}, m[:len(m)-3], {1, 0, 0, 0, 255, 255, 255, 255, 255, 255, 255, 255}} {
		if first, n := headerFields(b, "x-api-key"); first != "" || n != 0 {
			t.Errorf("%v: (%q, %d), want none", b, first, n)
		}
	}
}
