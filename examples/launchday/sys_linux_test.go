package main

import (
	"os"
	"testing"
	"time"
)

func TestCPUAccounting(t *testing.T) {
	// Burn a little CPU so that there is something to count.
	deadline := time.Now().Add(50 * time.Millisecond)
	for n := 0; time.Now().Before(deadline); n++ {
		_ = n * n
	}
	self, ok := selfCPU()
	if !ok || self <= 0 {
		t.Fatalf("selfCPU() = %v, %v", self, ok)
	}
	proc, ok := processCPU(os.Getpid())
	if !ok {
		t.Fatal("processCPU(self) failed")
	}
	// /proc counts in 10 ms ticks.
	if proc > self+50*time.Millisecond || proc < self-100*time.Millisecond {
		t.Errorf("processCPU(self) = %v, selfCPU() = %v: too far apart", proc, self)
	}
	if _, ok := processCPU(-1); ok {
		t.Error("processCPU(-1) succeeded")
	}
}
