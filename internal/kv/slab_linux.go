//go:build linux

package kv

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// hugePage is the size of an x86-64 (and arm64 4K-granule) transparent huge page.
const hugePage = 2 << 20

// adviseHuge asks the kernel to back b's whole, aligned 2 MiB ranges with
// transparent huge pages: a pool's first use then faults a huge page where
// it would fault 512 small ones (a slow trap on a virtual machine, where it
// made loading a restarted server's prefix from disk twice as slow), and
// attention over a long context, which reads blocks all over the slab,
// misses the TLB less. It is advice: with THP off nothing changes, and the
// caller may ignore the error (a kernel built without THP refuses it).
// It returns the range it advised, empty when b holds no whole huge page.
func adviseHuge(b []byte) ([]byte, error) {
	start := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	off := int((hugePage - start%hugePage) % hugePage)
	if len(b) < off+hugePage {
		return nil, nil
	}
	n := (len(b) - off) &^ (hugePage - 1)
	r := b[off : off+n]
	if err := unix.Madvise(r, unix.MADV_HUGEPAGE); err != nil {
		return nil, err
	}
	return r, nil
}
