//go:build !unix

package audit

import "os"

// lock is a no-op where flock(2) does not exist: there, one process at a
// time may write a data directory's audit log (the in-process mutex still
// orders appends within it).
func lock(*os.File, bool) error { return nil }

func unlock(*os.File) error { return nil }
