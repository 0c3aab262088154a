//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
)

// attackerNice is the nice value of this test process while it attacks the webhook pods.
//
// The attacker shares the test machine's two cores with the whole cluster: the apiserver, etcd
// and the webhook pods, which run within their CPU requests (100m) under the kubelet's cgroups.
// At the same weight as the cluster's processes, hundreds of its TLS goroutines take the cores
// from the pods it attacks, and the hostile step then measures this machine's scheduler rather
// than the webhook. On a real cluster the attacker is another machine, or a pod held to its own
// CPU share. At nice 10 it still gets every cycle the cluster leaves idle, and sends every
// request of every attack.
const attackerNice = 10

// niceAll sets the nice value of every thread of this process (nice is per thread on Linux;
// threads started later inherit it from the thread that starts them).
func niceAll(nice int) error {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return err
	}
	for _, task := range tasks {
		tid, err := strconv.Atoi(task.Name())
		if err != nil {
			continue
		}
		if err := syscall.Setpriority(syscall.PRIO_PROCESS, tid, nice); err != nil && err != syscall.ESRCH {
			return fmt.Errorf("thread %d: %w", tid, err)
		}
	}
	return nil
}

// yieldCPU lowers this process's priority to attackerNice and returns what restores the nice
// value it had (a test run under nice keeps its own).
func (a *attacker) yieldCPU() func() {
	a.t.Helper()
	// The raw system call answers 20 minus the nice value.
	prio, err := syscall.Getpriority(syscall.PRIO_PROCESS, 0)
	if err != nil {
		a.t.Fatalf("reading this process's priority: %v", err)
	}
	was := 20 - prio
	if err := niceAll(max(attackerNice, was)); err != nil {
		a.t.Fatalf("lowering the attacker's priority: %v", err)
	}
	return func() {
		if err := niceAll(was); err != nil {
			a.t.Errorf("restoring this process's priority: %v", err)
		}
	}
}
