//go:build unix

package audit

import (
	"os"

	"golang.org/x/sys/unix"
)

// lock takes an advisory lock on f: exclusive for appending, shared for
// reading. Another process (`kvserve key create` beside a running server)
// appends to the same file, and the chain is only intact if one append at
// a time reads the last record and writes the next.
func lock(f *os.File, exclusive bool) error {
	how := unix.LOCK_SH
	if exclusive {
		how = unix.LOCK_EX
	}
	for {
		err := unix.Flock(int(f.Fd()), how)
		if err != unix.EINTR {
			return err
		}
	}
}

func unlock(f *os.File) error { return unix.Flock(int(f.Fd()), unix.LOCK_UN) }
