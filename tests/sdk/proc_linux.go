package sdk

import (
	"os/exec"
	"syscall"
)

// setParentDeathSignal makes the kernel kill the child if the test process
// dies without running its cleanups (a test timeout, a crash), so no
// server or script outlives the test.
func setParentDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
