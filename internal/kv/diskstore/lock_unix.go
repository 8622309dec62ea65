//go:build unix

package diskstore

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// lockDir takes an exclusive lock on path (created if needed) for as long
// as the process holds the returned release function: two servers writing
// one store would delete each other's files.
func lockDir(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("diskstore: lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s is locked", ErrInUse, path)
		}
		return nil, fmt.Errorf("diskstore: lock: %w", err)
	}
	return func() { f.Close() }, nil
}
