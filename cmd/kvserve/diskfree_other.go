//go:build !unix

package main

// diskFree is unknown (0) where this build has no statfs: the disk tier
// then needs its size set.
func diskFree(string) int64 { return 0 }
