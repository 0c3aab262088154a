package testenv

import (
	"os/exec"
	"syscall"
)

// setParentDeathSignal has the kernel kill the child if the test binary dies without
// running its cleanups (for example `go test -timeout` panicking), so that no
// kube-controller-manager outlives it. Linux ties this to the thread that started the
// child, which the Go runtime keeps alive in practice; it is a safety net, not the
// shutdown path.
func setParentDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
