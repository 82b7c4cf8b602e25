//go:build unix

package verify_test

import (
	"syscall"
	"time"
)

// processCPU is the CPU time the test process has used (user and system, every thread: the
// garbage collector's work counts too). On a shared machine it is steadier than wall time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
