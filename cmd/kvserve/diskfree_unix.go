//go:build unix

package main

import "syscall"

// diskFree is the space free for unprivileged users on path's filesystem
// (0 when unknown).
func diskFree(path string) int64 {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return 0
	}
	return int64(st.Bavail) * int64(st.Bsize)
}
