//go:build !unix

package gguf

import (
	"fmt"
	"os"
)

// Open reads the whole file into memory and parses it (platforms without
// mmap support in this build).
func Open(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("gguf: read %s: %w", path, err)
	}
	f, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("gguf: %s: %w", path, err)
	}
	return f, nil
}

// OpenPlaced is Open: this build reads every file into ordinary memory.
func OpenPlaced(path string, _ Placement) (*File, error) { return Open(path) }

// HugePagesAvailable reports false: huge pages are used on Linux only.
func HugePagesAvailable() bool { return false }
