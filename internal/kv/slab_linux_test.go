//go:build linux

package kv

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

// TestAdviseHugeMarksAlignedInterior checks, in the kernel's own account
// (/proc/self/smaps), that the pool's slab is advised for huge pages over
// exactly its whole aligned 2 MiB ranges, and that sizes holding none are
// left alone.
func TestAdviseHugeMarksAlignedInterior(t *testing.T) {
	for _, size := range []int{0, 1, hugePage - 1, hugePage + 4096, 3*hugePage + 12345, 16 * hugePage} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			b := make([]byte, size)
			r, err := adviseHuge(b)
			if err != nil {
				t.Skipf("kernel refuses MADV_HUGEPAGE: %v", err)
			}
			if len(r) == 0 {
				if size >= 2*hugePage {
					t.Fatalf("size %d holds a whole huge page but nothing was advised", size)
				}
				return
			}
			lo := uintptr(unsafe.Pointer(&r[0]))
			if lo%hugePage != 0 || len(r)%hugePage != 0 {
				t.Fatalf("advised range [%#x, +%d) is not huge-page aligned", lo, len(r))
			}
			bLo := uintptr(unsafe.Pointer(&b[0]))
			if lo < bLo || lo+uintptr(len(r)) > bLo+uintptr(len(b)) {
				t.Fatalf("advised range lies outside the slab")
			}
			if bLo+uintptr(len(b))-(lo+uintptr(len(r))) >= hugePage || lo-bLo >= hugePage {
				t.Fatalf("a whole huge page of the slab was left unadvised")
			}
			for _, addr := range []uintptr{lo, lo + uintptr(len(r)) - 1} {
				flags, err := vmaFlags(addr)
				if err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(" "+flags+" ", " hg ") {
					t.Fatalf("mapping at %#x has flags %q, want hg (MADV_HUGEPAGE)", addr, flags)
				}
			}
		})
	}
}

// vmaFlags returns the VmFlags line of the mapping holding addr.
func vmaFlags(addr uintptr) (string, error) {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	in := false
	for sc.Scan() {
		line := sc.Text()
		if fields := strings.Fields(line); len(fields) > 0 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":") {
			lo, hi, ok := strings.Cut(fields[0], "-")
			if ok {
				l, err1 := strconv.ParseUint(lo, 16, 64)
				h, err2 := strconv.ParseUint(hi, 16, 64)
				in = err1 == nil && err2 == nil && uint64(addr) >= l && uint64(addr) < h
				continue
			}
		}
		if in {
			if v, ok := strings.CutPrefix(line, "VmFlags:"); ok {
				return strings.TrimSpace(v), nil
			}
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("no mapping holds %#x", addr)
}
