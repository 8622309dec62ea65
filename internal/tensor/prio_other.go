//go:build !linux

package tensor

// lowerThreadPriority is Linux-only: elsewhere threads keep their
// priority.
func lowerThreadPriority(int) error { return nil }
