//go:build go1.25

package header

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestAppendPushback(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{-time.Second, "1000"}, {0, "1000"}, {time.Microsecond, "1000"}, {999 * time.Millisecond, "1000"},
		{time.Second + 1, "1001"}, {2500 * time.Millisecond, "2500"}, {time.Hour, "3600000"},
	} {
		if got := string(AppendPushback(nil, c.d)); got != c.want {
			t.Errorf("AppendPushback(%v) = %q, want %q", c.d, got, c.want)
		}
	}
}

// TestEqualFoldLower compares IsGRPC's comparison with strings.EqualFold
// on every spelling of application/grpc with one byte or rune changed.
func TestEqualFoldLower(t *testing.T) {
	const g = "application/grpc"
	subs := []string{"A", "Z", "a", "@", "[", "\u212a", "\u017f", "\u0130", "\u0131", "\xff"}
	for i := range g {
		for _, sub := range append(subs, strings.ToUpper(g[i:i+1])) {
			s := g[:i] + sub + g[i+1:]
			if len(s) < len(g) {
				continue
			}
			if got, want := equalFoldLower(s[:len(g)], g), strings.EqualFold(s[:len(g)], g); got != want {
				t.Errorf("equalFoldLower(%q) = %v, strings.EqualFold %v", s[:len(g)], got, want)
			}
		}
	}
}

func TestIsGRPC(t *testing.T) {
	for ct, want := range map[string]bool{
		"application/grpc": true, "application/grpc+proto": true, "Application/GRPC;charset=x": true,
		"application/grpc-web": false, "application/grpcx": false, "application/json": false, "": false, "application/grp": false,
	} {
		if got := IsGRPC(ct); got != want {
			t.Errorf("IsGRPC(%q) = %v, want %v", ct, got, want)
		}
	}
}

// TestCeilSeconds: the division by a variable rounds exactly as the
// signed arithmetic it replaces, at the edges of int64 too.
func TestCeilSeconds(t *testing.T) {
	ceil := func(d time.Duration) int64 {
		if d <= 0 {
			return 0
		}
		s := int64(d / time.Second)
		if d%time.Second != 0 {
			s++
		}
		return s
	}
	ds := []time.Duration{math.MinInt64, -time.Second, -1, 0, 1, time.Second - 1, time.Second, time.Second + 1,
		1500 * time.Millisecond, time.Hour - 1, time.Hour, math.MaxInt64 - 1, math.MaxInt64}
	for d := time.Duration(1); d < 1<<62; d = d*3 + 7 {
		ds = append(ds, d, d-1, d+1)
	}
	for _, d := range ds {
		if got, want := CeilSeconds(d), ceil(d); got != want {
			t.Errorf("CeilSeconds(%d) = %d, want %d", d, got, want)
		}
		if got, want := RetryAfterSeconds(d), max(ceil(d), 1); got != want {
			t.Errorf("RetryAfterSeconds(%d) = %d, want %d", d, got, want)
		}
	}
}
