//go:build linux

package sample

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// threadCPU returns the CPU time consumed by the calling OS thread, in
// microseconds.
func threadCPU() float64 {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e3
}

// cpuLoop runs f b.N times on one locked thread and reports the thread's CPU
// time per iteration: on a machine shared with other jobs this is steadier
// than wall time, which also counts the time the thread waited for a core.
func cpuLoop(b *testing.B, f func()) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start := threadCPU()
	for b.Loop() {
		f()
	}
	b.ReportMetric((threadCPU()-start)/float64(b.N), "cpu-µs/op")
}
