package cluster

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// startNextTo starts a long-running process inside the cluster's network namespace (so it
// reaches the apiserver and the pods), logging to Dir/logs/NAME.log, and stops it before
// the cluster goes down. The kernel kills it if the test binary dies first.
// The returned channel is closed when the process exits.
func (c *Cluster) startNextTo(tb testing.TB, name, path string, args ...string) <-chan struct{} {
	tb.Helper()
	logPath := filepath.Join(c.Dir, "logs", name+".log")
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		tb.Fatalf("cluster: %v", err)
	}
	cmd := c.Command(context.Background(), path, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		tb.Fatalf("cluster: starting %s: %v", name, err)
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		log.Close()
		close(exited)
	}()
	c.onStop(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})
	return exited
}

// waitHTTP polls url from inside the namespace until it answers 200, or fails the test
// after timeout or when the process serving it exits, naming the log to read.
func (c *Cluster) waitHTTP(tb testing.TB, what, url string, timeout time.Duration, exited <-chan struct{}) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			tb.Fatalf("cluster: %s exited before it was ready; see %s", what, filepath.Join(c.Dir, "logs", what+".log"))
		default:
		}
		resp, err := c.HTTPClient.Get(url)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			last = fmt.Sprintf("%s: %s", resp.Status, b)
		} else {
			last = err.Error()
		}
		time.Sleep(250 * time.Millisecond)
	}
	tb.Fatalf("cluster: %s not ready at %s after %s (last: %s); see %s", what, url, timeout, last, filepath.Join(c.Dir, "logs"))
}

// startedNextTo returns what StartCertManager or StartPrometheus returned for name when it
// already ran on this cluster.
func (c *Cluster) startedNextTo(name string) (any, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.started[name]
	return v, ok
}

func (c *Cluster) markStarted(name string, v any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started == nil {
		c.started = map[string]any{}
	}
	c.started[name] = v
}
