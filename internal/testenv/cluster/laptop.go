package cluster

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Where the apiserver listens inside the namespace; every node's kubelet listens on
// KubeletPort at its address (Node.IP).
const (
	APIServerAddr = "10.200.0.2:6443"
	KubeletPort   = "10250"
)

// nobody is the unprivileged user on-call commands run as.
const nobody = 65534

// Laptop is where on call stands: outside the node's network namespace, as a user other than
// root, with a kubeconfig and nothing else. The apiserver is reached through a relay on the
// host's loopback, the way a laptop reaches a cluster's API endpoint; pods, Services and
// cluster DNS are not reachable at all. Commands run from a directory of their own holding
// copies of the binaries, widgetctl also as the kubectl plugin kubectl-widget.
type Laptop struct {
	// Dir is the user's home and working directory; it holds the binaries and kubeconfig.
	Dir        string
	Kubeconfig string
}

// Laptop starts the relay and prepares the directory; both go when the test ends. bins are
// the names of binaries in c.Bin to copy, NAME or NAME:AS (helm4:helm); widgetctl also becomes
// kubectl-widget.
func (c *Cluster) Laptop(tb testing.TB, bins ...string) *Laptop {
	tb.Helper()
	dir := tb.TempDir()
	l := &Laptop{Dir: dir, Kubeconfig: filepath.Join(dir, "kubeconfig")}
	for _, b := range bins {
		b, as, ok := strings.Cut(b, ":")
		if !ok {
			as = b
		}
		copyExecutable(tb, filepath.Join(c.Bin, b), filepath.Join(dir, as))
		if b == "widgetctl" {
			copyExecutable(tb, filepath.Join(c.Bin, b), filepath.Join(dir, "kubectl-widget"))
		}
	}
	addr := c.relayAPIServer(tb)
	kc, err := clientcmd.LoadFromFile(c.Kubeconfig)
	if err != nil {
		tb.Fatalf("laptop: read %s: %v", c.Kubeconfig, err)
	}
	// The credentials go inside: the admin kubeconfig names files only root may read.
	if err := clientcmdapi.FlattenConfig(kc); err != nil {
		tb.Fatalf("laptop: %v", err)
	}
	for _, cl := range kc.Clusters {
		cl.Server = "https://" + addr // 127.0.0.1 is in the apiserver's certificate
	}
	if err := clientcmd.WriteToFile(*kc, l.Kubeconfig); err != nil {
		tb.Fatalf("laptop: write the kubeconfig: %v", err)
	}
	for _, p := range []string{dir, l.Kubeconfig} {
		if err := os.Chown(p, nobody, nobody); err != nil {
			tb.Fatalf("laptop: %v", err)
		}
	}
	// t.TempDir's parent is root's and closed to others.
	for p := dir; p != os.TempDir() && p != "/"; p = filepath.Dir(p) {
		if err := os.Chmod(p, 0o755); err != nil {
			tb.Fatalf("laptop: %v", err)
		}
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		tb.Fatalf("laptop: %v", err)
	}
	return l
}

// Command runs name (a copied binary, or any command on the host's PATH) as nobody in Dir,
// with HOME=Dir, PATH=Dir:/usr/bin:/bin and KUBECONFIG set, outside the namespace.
func (l *Laptop) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	if _, err := os.Stat(filepath.Join(l.Dir, name)); err == nil {
		name = filepath.Join(l.Dir, name)
	}
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = l.Dir
	cmd.Env = []string{"HOME=" + l.Dir, "PATH=" + l.Dir + ":/usr/bin:/bin", "KUBECONFIG=" + l.Kubeconfig}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	return cmd
}

// Run runs a command (see Command) and returns its stdout, stderr and exit code; an error
// only when it could not run.
func (l *Laptop) Run(ctx context.Context, name string, args ...string) (stdout, stderr string, code int, err error) {
	var o, e bytes.Buffer
	cmd := l.Command(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return o.String(), e.String(), exit.ExitCode(), nil
	}
	return o.String(), e.String(), 0, err
}

// relayAPIServer relays connections from a port on the host's loopback to the apiserver in
// the namespace, until the test ends.
func (c *Cluster) relayAPIServer(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("laptop: relay: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var mu sync.Mutex
	open := map[net.Conn]bool{}
	track := func(conn net.Conn, add bool) {
		mu.Lock()
		defer mu.Unlock()
		if add {
			open[conn] = true
		} else {
			delete(open, conn)
		}
	}
	wg.Go(func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer in.Close()
				out, err := c.DialContext(ctx, "tcp", APIServerAddr)
				if err != nil {
					return
				}
				defer out.Close()
				track(in, true)
				track(out, true)
				defer track(in, false)
				defer track(out, false)
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(out, in); done <- struct{}{} }()
				go func() { _, _ = io.Copy(in, out); done <- struct{}{} }()
				<-done
			})
		}
	})
	tb.Cleanup(func() {
		cancel()
		_ = ln.Close()
		mu.Lock()
		for conn := range open {
			_ = conn.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

func copyExecutable(tb testing.TB, from, to string) {
	tb.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		tb.Fatalf("laptop: %v (make build, or scripts/toolchain.sh)", err)
	}
	if err := os.WriteFile(to, data, 0o755); err != nil {
		tb.Fatalf("laptop: %v", err)
	}
}

// CopyDir copies the directory tree from into Dir/name, readable by the laptop's user, and
// returns its path (a chart, say, as on call's checkout of it).
func (l *Laptop) CopyDir(tb testing.TB, from, name string) string {
	tb.Helper()
	to := filepath.Join(l.Dir, name)
	err := filepath.WalkDir(from, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(from, path)
		if err != nil {
			return err
		}
		dst := filepath.Join(to, rel)
		if d.IsDir() {
			if err := os.MkdirAll(dst, 0o755); err != nil {
				return err
			}
			return os.Chown(dst, nobody, nobody)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if err := os.WriteFile(dst, data, 0o644); err != nil {
			return err
		}
		return os.Chown(dst, nobody, nobody)
	})
	if err != nil {
		tb.Fatalf("laptop: copy %s: %v", from, err)
	}
	return to
}
