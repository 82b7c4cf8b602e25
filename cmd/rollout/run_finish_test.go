package main

import (
	"runtime/debug"
	"testing"
)

// The end of a run lowers the runtime's memory limit while it reads the journal again and puts
// back the limit it found; a limit already lower (GOMEMLIMIT) is left alone.
func TestLimitFinishMemory(t *testing.T) {
	orig := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(orig)
	for _, tc := range []struct {
		name        string
		before, got int64
	}{
		{"unset", 1<<63 - 1, finishMemoryLimit},
		{"higher", 1 << 30, finishMemoryLimit},
		{"lower", 64 << 20, 64 << 20},
	} {
		debug.SetMemoryLimit(tc.before)
		restore := limitFinishMemory()
		if got := debug.SetMemoryLimit(-1); got != tc.got {
			t.Errorf("%s: limit during the end of the run %d, want %d", tc.name, got, tc.got)
		}
		restore()
		if got := debug.SetMemoryLimit(-1); got != tc.before {
			t.Errorf("%s: limit after the end of the run %d, want %d back", tc.name, got, tc.before)
		}
	}
}
