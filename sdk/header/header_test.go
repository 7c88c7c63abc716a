//go:build go1.25

package header

import (
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
