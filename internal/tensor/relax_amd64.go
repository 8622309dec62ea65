//go:build amd64 && !purego

package tensor

// cpuRelax executes the PAUSE spin-wait hint.
//
//go:noescape
func cpuRelax()
