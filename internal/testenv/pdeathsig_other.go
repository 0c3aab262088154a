//go:build !linux

package testenv

import "os/exec"

// setParentDeathSignal is a no-op where the kernel offers no parent-death signal.
func setParentDeathSignal(*exec.Cmd) {}
