//go:build !linux

package sample

import "testing"

// cpuLoop runs f b.N times (CPU time is only reported on Linux).
func cpuLoop(b *testing.B, f func()) {
	for b.Loop() {
		f()
	}
}
