//go:build !linux

package sdk

import "os/exec"

// setParentDeathSignal does nothing where the kernel has no parent-death
// signal; cleanups stop the children.
func setParentDeathSignal(*exec.Cmd) {}
