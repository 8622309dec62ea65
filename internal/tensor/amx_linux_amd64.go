//go:build linux && amd64 && !purego

package tensor

import (
	"fmt"
	"syscall"
)

// Linux's arch_prctl request for an extended state component, and the
// component of the tiles' data (arch/x86/include/uapi/asm/prctl.h).
const (
	archReqXcompPerm  = 0x1023
	xfeatureXTileData = 18
)

// requestAMX asks the kernel for the tiles' state (Linux 5.16 and later);
// older kernels and those built without it refuse.
func requestAMX() error {
	if _, _, e := syscall.RawSyscall(syscall.SYS_ARCH_PRCTL, archReqXcompPerm, xfeatureXTileData, 0); e != 0 {
		return fmt.Errorf("arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA): %w", e)
	}
	return nil
}
