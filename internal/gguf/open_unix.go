//go:build unix

package gguf

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Open maps the file at path read-only and parses it. Tensor data stays in the
// mapping (the page cache), so resident memory grows only with the pages a
// computation touches. Call Close to unmap.
func Open(path string) (*File, error) { return OpenPlaced(path, Mapped) }

// OpenPlaced opens the file at path with its bytes placed as p says (see
// Placement) and parses it. Call Close to release the memory.
func OpenPlaced(path string, p Placement) (*File, error) {
	fd, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("gguf: open %s: %w", path, err)
	}
	defer fd.Close()
	st, err := fd.Stat()
	if err != nil {
		return nil, fmt.Errorf("gguf: stat %s: %w", path, err)
	}
	size := st.Size()
	if size == 0 {
		return nil, fmt.Errorf("load %s: gguf: %w: empty file", path, ErrFormat)
	}
	if int64(int(size)) != size {
		return nil, fmt.Errorf("gguf: %s: file too large to map (%d bytes)", path, size)
	}
	var data []byte
	var release func() error
	var protect func(bool) error
	var discard func([]byte) int64
	if p == HugePages {
		data, release, protect, err = readHuge(fd, int(size))
		if err != nil {
			return nil, fmt.Errorf("gguf: read %s into huge pages: %w", path, err)
		}
		if data != nil {
			discard = discardPages
		}
	}
	if data == nil { // Mapped, or no huge pages on this system
		data, err = unix.Mmap(int(fd.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			return nil, fmt.Errorf("gguf: mmap %s: %w", path, err)
		}
		release = func() error { return unix.Munmap(data) }
	}
	f, err := Parse(data)
	if err != nil {
		_ = release()
		return nil, fmt.Errorf("load %s: %w", path, err)
	}
	f.closer = release
	f.protect = protect
	f.discard = discard
	return f, nil
}
