//go:build !linux

package tensor

import "runtime"

// osYield yields to other goroutines (no portable OS-level yield).
func osYield() { runtime.Gosched() }
