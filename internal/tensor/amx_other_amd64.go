//go:build !linux && amd64 && !purego

package tensor

import "errors"

// requestAMX: only the Linux request is written; elsewhere the tiles are
// left alone.
func requestAMX() error { return errors.New("tile state is requested on Linux only") }
