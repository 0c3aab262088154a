package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Process is a child process a test started: kube-controller-manager, widget-manager, and
// whatever else runs next to the control plane. Its output goes to LogFile, which Env keeps
// when the test fails.
type Process struct {
	// Name is the process's name in messages.
	Name string
	// Args are its command-line arguments.
	Args []string
	// LogFile is the path of its combined stdout and stderr.
	LogFile string

	cmd     *exec.Cmd
	exited  chan struct{} // closed when the process has exited
	waitErr error         // the process's exit status, valid once exited is closed
}

// StartProcess starts path with args and extra environment variables (added to the test's
// own), logging to log. The caller stops it (Stop) or registers that in a Cleanup.
func StartProcess(name, path string, args, env []string, log *os.File) (*Process, error) {
	p := &Process{Name: name, Args: args, LogFile: log.Name()}
	p.cmd = exec.Command(path, args...)
	p.cmd.Stdout, p.cmd.Stderr = log, log
	p.cmd.Env = append(os.Environ(), env...)
	setParentDeathSignal(p.cmd)
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", path, err)
	}
	p.exited = make(chan struct{})
	go func() {
		p.waitErr = p.cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// Pid is the process ID.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Exited is closed when the process has exited.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// ExitErr is the exit status once Exited is closed.
func (p *Process) ExitErr() error { return p.waitErr }

// Signal sends sig to the process, by its PID only.
func (p *Process) Signal(sig syscall.Signal) error {
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signal %s (pid %d): %w", p.Name, p.Pid(), err)
	}
	return nil
}

// Stop sends SIGTERM and waits up to grace for the exit before sending SIGKILL.
func (p *Process) Stop(tb testing.TB, grace time.Duration) {
	select {
	case <-p.exited:
		return
	default:
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		tb.Logf("testenv: %v", err)
	}
	select {
	case <-p.exited:
		return
	case <-time.After(grace):
	}
	tb.Logf("testenv: %s (pid %d) still running %s after SIGTERM; killing it", p.Name, p.Pid(), grace)
	if err := p.Signal(syscall.SIGKILL); err != nil {
		tb.Errorf("testenv: %v", err)
		return
	}
	<-p.exited
}

// LogTail returns the last n lines of the process's log.
func (p *Process) LogTail(n int) string { return tailFile(p.LogFile, n) }

// LogContains reports whether the process's log holds s.
func (p *Process) LogContains(s string) bool {
	data, err := os.ReadFile(p.LogFile)
	return err == nil && strings.Contains(string(data), s)
}

// CreateLog opens a log file for a component in the Env's log directory (kept when the test
// fails).
func (e *Env) CreateLog(tb testing.TB, component string) *os.File {
	tb.Helper()
	return e.createLog(tb, component)
}
