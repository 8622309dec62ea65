//go:build !amd64 || purego

package tensor

// cpuRelax is the spin-wait hint; the portable build has none.
func cpuRelax() {}
