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
func Open(path string) (*File, error) {
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
	data, err := unix.Mmap(int(fd.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("gguf: mmap %s: %w", path, err)
	}
	f, err := Parse(data)
	if err != nil {
		_ = unix.Munmap(data)
		return nil, fmt.Errorf("load %s: %w", path, err)
	}
	f.closer = func() error { return unix.Munmap(data) }
	return f, nil
}
