//go:build unix && !linux

package gguf

import "os"

// readHuge places nothing: this build knows huge pages on Linux only, and
// the caller maps the file instead.
func readHuge(*os.File, int) ([]byte, func() error, func(bool) error, error) {
	return nil, nil, nil, nil
}

// discardPages gives nothing back: there are no huge-page copies here.
func discardPages([]byte) int64 { return 0 }

// HugePagesAvailable reports false: huge pages are used on Linux only.
func HugePagesAvailable() bool { return false }
