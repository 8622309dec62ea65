//go:build linux

package gguf

import (
	"fmt"
	"io"
	"os"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// hugePageSize is the size of an x86-64 / arm64 transparent huge page.
const hugePageSize = 2 << 20

// readHuge reads the first size bytes of fd into private anonymous memory
// aligned to a huge page and advised for transparent huge pages, then makes
// it read-only. release unmaps it; protect makes it writable or read-only
// again.
func readHuge(fd *os.File, size int) (data []byte, release func() error, protect func(writable bool) error, err error) {
	// Over-allocate by one huge page so the data can start on a boundary:
	// only whole, aligned 2 MiB ranges can be huge pages.
	region, err := unix.Mmap(-1, 0, size+hugePageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("mmap %d bytes: %w", size+hugePageSize, err)
	}
	release = func() error { return unix.Munmap(region) }
	off := 0
	if r := int(uintptrOf(region) % hugePageSize); r != 0 {
		off = hugePageSize - r
	}
	data = region[off : off+size : off+size]
	// Advice, not a requirement: without it (THP off) the copy still works.
	_ = unix.Madvise(data, unix.MADV_HUGEPAGE)
	if _, err := io.ReadFull(io.NewSectionReader(fd, 0, int64(size)), data); err != nil {
		_ = release()
		return nil, nil, nil, err
	}
	protect = func(writable bool) error {
		prot := unix.PROT_READ
		if writable {
			prot |= unix.PROT_WRITE
		}
		if err := unix.Mprotect(data, prot); err != nil {
			return fmt.Errorf("mprotect: %w", err)
		}
		return nil
	}
	if err := protect(false); err != nil {
		_ = release()
		return nil, nil, nil, err
	}
	return data, release, protect, nil
}

// discardPages gives back the whole pages inside b, part of a region
// readHuge made (MADV_DONTNEED: the kernel frees them, and a later read
// finds zeros), and returns their bytes. A huge page b shares with a
// neighbour is split, the neighbour's part kept in small pages.
func discardPages(b []byte) int64 {
	if len(b) == 0 {
		return 0
	}
	const page = 4096
	start := uintptrOf(b)
	lo := (start + page - 1) &^ (page - 1)
	hi := (start + uintptr(len(b))) &^ (page - 1)
	if hi <= lo {
		return 0
	}
	inner := b[lo-start : hi-start]
	if err := unix.Madvise(inner, unix.MADV_DONTNEED); err != nil {
		return 0
	}
	return int64(len(inner))
}

// HugePagesAvailable reports whether the kernel hands out transparent huge
// pages to memory that asks for them (the THP mode is "always" or
// "madvise", not "never").
func HugePagesAvailable() bool {
	b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil {
		return false
	}
	s := string(b)
	return strings.Contains(s, "[always]") || strings.Contains(s, "[madvise]")
}

func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
