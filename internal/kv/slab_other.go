//go:build !linux

package kv

// adviseHuge does nothing: this build asks for huge pages on Linux only.
func adviseHuge([]byte) ([]byte, error) { return nil, nil }
