//go:build unix

package market

import (
	"syscall"
	"time"
)

// processCPU is the CPU time the test process has used, user and system,
// over all its threads: a benchmark's cost that other processes on a
// shared machine disturb far less than its wall time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
