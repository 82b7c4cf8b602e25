package benchutil

import (
	"os"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// PeakHeap samples the heap in use until stop is called, and returns its peak in bytes.
func PeakHeap() (stop func() uint64) {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	var peak atomic.Uint64
	read := func() {
		metrics.Read(sample)
		if v := sample[0].Value.Uint64(); v > peak.Load() {
			peak.Store(v)
		}
	}
	quit, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				read()
			}
		}
	}()
	return func() uint64 {
		close(quit)
		<-exited
		read()
		return peak.Load()
	}
}

// PeakRSS resets the kernel's peak resident set size of the process (VmHWM) and returns a
// function that reads it, in bytes; 0 where /proc does not have it.
func PeakRSS() (read func() uint64) {
	os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
	return func() uint64 {
		data, err := os.ReadFile("/proc/self/status")
		if err != nil {
			return 0
		}
		for line := range strings.Lines(string(data)) {
			if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
				kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
				return kb << 10
			}
		}
		return 0
	}
}
