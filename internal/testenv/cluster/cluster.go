// Package cluster runs the end-to-end tier's real Kubernetes cluster (scripts/local-cluster.sh)
// for Go tests: containerd, kubelet and kube-proxy on each node, every node inside a network
// namespace of its own, the first next to the pinned control plane, with images imported
// from tarballs, and on demand cert-manager's real controllers and Prometheus. A cluster has
// one node unless a test asks for more (StartNodes).
//
// The apiserver and the pods are reachable only inside that namespace. Tests reach them
// through Cluster.Config and Cluster.HTTPClient, whose connections are opened from inside
// the namespace (DialContext), and run command-line tools there with Cluster.Command.
//
// It needs root and the Debian packages in scripts/apt-packages.txt (scripts/prereqs.sh e2e
// installs them). Without them a test fails, naming the command to run; see Require.
package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/widgetry/widget-operator/internal/testenv/prereq"
)

const (
	// Name is the network namespace and cgroup name of the cluster.
	Name = "widget-cluster"
	// NodeName is the first node's name and NodeIP its address inside the namespace.
	NodeName = "widget-node"
	NodeIP   = "10.200.0.2"
	// ZoneLabel is the label that gives each node its zone (scripts/local-cluster.sh:
	// CLUSTER_ZONES, by default zone-a, zone-b, zone-c in turn).
	ZoneLabel = "topology.kubernetes.io/zone"
	// lockFile serialises clusters across test binaries, the demo and people running
	// scripts/local-cluster.sh: one cluster at a time on a machine (two kubelets on the
	// cgroupfs driver would fight over their cgroups). The script uses the same path.
	lockFile = "/tmp/widget-cluster.lock"
)

// Cluster is a running cluster. Its fields are read-only.
type Cluster struct {
	// Root is the repository root, Bin the directory of the pinned binaries.
	Root, Bin string
	// Dir is the state directory (scripts/local-cluster.sh's $CLUSTER_DIR); logs are kept
	// in Dir/logs, pod logs in Dir/varlog/pods.
	Dir string
	// NetNS is the path of the cluster's network namespace.
	NetNS string
	// Kubeconfig is the cluster-admin kubeconfig (its server is reachable only in NetNS).
	Kubeconfig string
	// Nodes are the cluster's nodes, the first (in NetNS, with the control plane) first.
	Nodes []Node
	// UpTook is how long scripts/local-cluster.sh up took, until every node was Ready.
	UpTook time.Duration
	// Config is a cluster-admin rest.Config whose connections are dialled inside NetNS.
	Config *rest.Config
	// Client is a clientset on Config.
	Client kubernetes.Interface
	// HTTPClient reaches pod IPs and Service ClusterIPs from inside NetNS.
	HTTPClient *http.Client

	lock    *os.File
	stopped bool
	mu      sync.Mutex
	// started names what runs next to the cluster (cert-manager, prometheus), so that a
	// shared cluster starts each once.
	started map[string]any
}

// Require checks what the cluster needs (root, the Debian packages, the right to make
// namespaces: scripts/prereqs.sh e2e; and the pinned binaries) and returns the repository
// root and the binaries directory. A missing prerequisite fails the test with the command
// that provides it; it never skips.
func Require(tb testing.TB) (root, bin string) {
	tb.Helper()
	root = prereq.RepoRoot(tb)
	bin = filepath.Join(root, "bin")
	if dir := os.Getenv("CLUSTER_BIN"); dir != "" {
		bin = dir
	}
	prereq.Check(tb, "e2e")
	for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy", "kubectl", "helm3", "mkimage", "pause", "sample-server"} {
		if fi, err := os.Stat(filepath.Join(bin, b)); err != nil || fi.Mode()&0o111 == 0 {
			prereq.Missing(tb, filepath.Join(bin, b), "make tools (scripts/toolchain.sh)")
		}
	}
	return root, bin
}

// Start brings a one-node cluster up (scripts/local-cluster.sh up) for one test and tears it
// down when the test ends, also when it fails; a failed test's component logs are kept and
// their folder is logged. It waits for a cluster of another test binary to go first. Tests
// that can share a cluster use Shared instead.
func Start(tb testing.TB) *Cluster {
	tb.Helper()
	return StartNodes(tb, 1)
}

// StartNodes is Start with n nodes (1 to 9), each in its own zone while there are three or
// fewer.
func StartNodes(tb testing.TB, n int) *Cluster {
	tb.Helper()
	root, bin := Require(tb)
	c, err := up(root, bin, n, tb.Logf)
	if c != nil {
		tb.Cleanup(func() { c.stop(tb, tb.Failed()) })
	}
	if err != nil {
		tb.Fatalf("cluster: %v", err)
	}
	return c
}

var shared struct {
	sync.Mutex
	c      *Cluster
	err    error
	failed bool
}

// Shared returns the package's shared cluster, bringing it up on first use. The package's
// TestMain must call Main, which tears it down after the last test (keeping the logs if a
// test failed). Tests sharing it clean up what they create (their own namespace is simplest).
func Shared(tb testing.TB) *Cluster {
	tb.Helper()
	root, bin := Require(tb)
	shared.Lock()
	defer shared.Unlock()
	if shared.c == nil && shared.err == nil {
		shared.c, shared.err = up(root, bin, 1, tb.Logf)
	}
	if shared.err != nil {
		tb.Fatalf("cluster: %v", shared.err)
	}
	tb.Cleanup(func() {
		if tb.Failed() {
			shared.Lock()
			shared.failed = true
			shared.Unlock()
		}
	})
	return shared.c
}

// Main runs the package's tests and then tears the shared cluster down, if one was started.
// Use it as: func TestMain(m *testing.M) { os.Exit(cluster.Main(m)) }
func Main(m *testing.M) int {
	code := m.Run()
	shared.Lock()
	defer shared.Unlock()
	if c := shared.c; c != nil {
		r := &stderrReporter{}
		c.stop(r, code != 0 || shared.failed)
		if r.failed && code == 0 {
			code = 1
		}
	}
	return code
}

// reporter is what stopping a cluster reports to: a test, or stderr after the last test.
type reporter interface {
	Logf(format string, args ...any)
	Errorf(format string, args ...any)
}

type stderrReporter struct{ failed bool }

func (r *stderrReporter) Logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
}
func (r *stderrReporter) Errorf(format string, args ...any) {
	r.failed = true
	fmt.Fprintf(os.Stderr, format+"\n", args...)
}

// up takes the machine-wide lock, runs scripts/local-cluster.sh up and builds the clients.
// A non-nil Cluster is returned whenever something needs stopping, also with an error.
func up(root, bin string, nodes int, logf func(string, ...any)) (*Cluster, error) {
	if nodes < 1 || nodes > 9 {
		return nil, fmt.Errorf("%d nodes: want 1 to 9", nodes)
	}
	// The machine-wide flock would wait forever for a cluster of this same process.
	running.Lock()
	defer running.Unlock()
	if running.c != nil && !running.c.isStopped() {
		return nil, errors.New("a cluster of this test binary is still up (one at a time: a package " +
			"uses either Shared for all its tests or Start in each)")
	}
	c := &Cluster{
		Root:       root,
		Bin:        bin,
		Dir:        clusterDir(),
		NetNS:      "/run/netns/" + Name,
		Kubeconfig: filepath.Join(clusterDir(), "admin.kubeconfig"),
		Nodes:      nodesOf(nodes),
	}
	lock, err := acquireLock(logf, 15*time.Minute)
	if err != nil {
		return nil, err
	}
	c.lock = lock

	start := time.Now()
	if out, err := c.script(context.Background(), "up"); err != nil {
		return c, fmt.Errorf("scripts/local-cluster.sh up: %w\n%s", err, out)
	}
	c.UpTook = time.Since(start)
	logf("cluster: %d node(s) up in %s (state in %s)", nodes, c.UpTook.Round(100*time.Millisecond), c.Dir)

	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return c, fmt.Errorf("loading %s: %w", c.Kubeconfig, err)
	}
	cfg.Dial = c.DialContext
	cfg.QPS, cfg.Burst = 50, 100
	c.Config = cfg
	if c.Client, err = kubernetes.NewForConfig(cfg); err != nil {
		return c, fmt.Errorf("clientset: %w", err)
	}
	c.HTTPClient = &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{DialContext: c.DialContext, DisableKeepAlives: true},
	}
	running.c = c
	return c, nil
}

// running is this process's cluster, if one is up.
var running struct {
	sync.Mutex
	c *Cluster
}

func (c *Cluster) isStopped() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stopped
}

// Stop tears the cluster down now and fails the test if anything of it is left behind (a
// process, the namespace, a cgroup or a mount). Start's cleanup does the same; Stop is
// for tests that check the teardown itself.
func (c *Cluster) Stop(tb testing.TB) {
	tb.Helper()
	c.stop(tb, tb.Failed())
	if left := Leftovers(c.Dir); len(left) > 0 {
		tb.Errorf("cluster: left behind after down: %s", strings.Join(left, "; "))
	}
}

func (c *Cluster) stop(tb reporter, keepLogs bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return
	}
	c.stopped = true
	if keepLogs {
		if kept, err := c.keepLogs(); err != nil {
			tb.Logf("cluster: keeping the logs: %v", err)
		} else {
			tb.Logf("cluster: component logs of the failed run kept in %s", kept)
		}
	}
	if out, err := c.script(context.Background(), "down", "--purge"); err != nil {
		tb.Errorf("cluster: scripts/local-cluster.sh down: %v\n%s", err, out)
	}
	if c.lock != nil {
		c.lock.Close() // releases the flock
	}
}

// keepLogs copies the component and pod logs to $CLUSTER_LOGS_DIR (default
// $TMPDIR/widget-cluster-logs-TIME), before down --purge removes the state directory.
func (c *Cluster) keepLogs() (string, error) {
	dest := os.Getenv("CLUSTER_LOGS_DIR")
	if dest == "" {
		dest = filepath.Join(os.TempDir(), "widget-cluster-logs-"+time.Now().Format("20060102-150405"))
	}
	if err := os.MkdirAll(dest, 0o755); err != nil {
		return "", err
	}
	// kubectl describe of everything, while the cluster still answers.
	if out, err := c.Command(context.Background(), filepath.Join(c.Bin, "kubectl"), "--kubeconfig", c.Kubeconfig,
		"get", "nodes,pods,services,endpointslices,events,deployments", "-A", "-o", "wide").CombinedOutput(); err == nil {
		if err := os.WriteFile(filepath.Join(dest, "objects.txt"), out, 0o644); err != nil {
			return "", fmt.Errorf("keep the cluster's objects: %w", err)
		}
	}
	subs := []string{"logs", "varlog/pods"}
	for i := 2; i <= len(c.Nodes); i++ {
		subs = append(subs, fmt.Sprintf("node%d/varlog/pods", i))
	}
	for _, sub := range subs {
		if _, err := os.Stat(filepath.Join(c.Dir, sub)); err != nil {
			continue
		}
		to := filepath.Join(dest, filepath.Dir(sub))
		if err := os.MkdirAll(to, 0o755); err != nil {
			return "", err
		}
		if out, err := exec.Command("cp", "-a", filepath.Join(c.Dir, sub), to+"/").CombinedOutput(); err != nil {
			return "", fmt.Errorf("cp %s: %w: %s", sub, err, out)
		}
	}
	return dest, nil
}

// Command returns a command that runs inside the cluster's network namespace with
// KUBECONFIG set to the admin kubeconfig.
func (c *Cluster) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"--net=" + c.NetNS, name}, args...)...)
	cmd.Env = append(os.Environ(),
		"KUBECONFIG="+c.Kubeconfig,
		"HELM_CACHE_HOME="+filepath.Join(c.Dir, "helm", "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(c.Dir, "helm", "config"),
		"HELM_DATA_HOME="+filepath.Join(c.Dir, "helm", "data"),
		"KUBECACHEDIR="+filepath.Join(c.Dir, "kubectl-cache"),
	)
	cmd.Dir = c.Root
	return cmd
}

// Run runs a command inside the namespace (see Command) and returns its combined output,
// failing the test with that output if it fails.
func (c *Cluster) Run(tb testing.TB, name string, args ...string) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout(args))
	defer cancel()
	out, err := c.Command(ctx, name, args...).CombinedOutput()
	if err != nil {
		tb.Fatalf("cluster: %s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
	}
	return string(out)
}

// runTimeout is how long Run lets a command take: 5 minutes, or a minute more than the
// command's own --timeout (helm --wait, kubectl wait and rollout status), so that the command
// reports its own timeout with what it waited for, instead of being killed first.
func runTimeout(args []string) time.Duration {
	limit := 5 * time.Minute
	for i, a := range args {
		v, ok := strings.CutPrefix(a, "--timeout=")
		if !ok && a == "--timeout" && i+1 < len(args) {
			v, ok = args[i+1], true
		}
		if d, err := time.ParseDuration(v); ok && err == nil && d+time.Minute > limit {
			limit = d + time.Minute
		}
	}
	return limit
}

// Kubectl runs bin/kubectl against the cluster and returns its output.
func (c *Cluster) Kubectl(tb testing.TB, args ...string) string {
	tb.Helper()
	return c.Run(tb, filepath.Join(c.Bin, "kubectl"), args...)
}

// Helm runs bin/helm3 against the cluster and returns its output.
func (c *Cluster) Helm(tb testing.TB, args ...string) string {
	tb.Helper()
	return c.Run(tb, filepath.Join(c.Bin, "helm3"), args...)
}

// ImportImage imports image tarballs (docker or OCI archives, e.g. from bin/mkimage or
// `make image`) into the node's containerd, so pods with imagePullPolicy IfNotPresent
// run them without a registry.
func (c *Cluster) ImportImage(tb testing.TB, tarballs ...string) {
	tb.Helper()
	if out, err := c.script(context.Background(), append([]string{"import"}, tarballs...)...); err != nil {
		tb.Fatalf("cluster: importing %v: %v\n%s", tarballs, err, out)
	}
}

// script runs scripts/local-cluster.sh with this cluster's settings.
func (c *Cluster) script(ctx context.Context, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(c.Root, "scripts", "local-cluster.sh"), args...)
	// This process holds the machine-wide lock (acquireLock); the script takes it otherwise.
	cmd.Env = append(os.Environ(), "CLUSTER_DIR="+c.Dir, "CLUSTER_NAME="+Name, "CLUSTER_BIN="+c.Bin, "CLUSTER_LOCK_HELD=1",
		fmt.Sprintf("CLUSTER_NODES=%d", len(c.Nodes)), "CLUSTER_ZONES=")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.Bytes(), err
}

// Leftovers lists what of a cluster is still present on the machine: its network
// namespace, processes in it, its cgroups, mounts under its state directory. Empty when
// the teardown was complete.
func Leftovers(dir string) []string {
	var left []string
	namespaces, _ := filepath.Glob("/run/netns/" + Name + "-node[0-9]")
	if _, err := os.Stat("/run/netns/" + Name); err == nil {
		namespaces = append(namespaces, "/run/netns/"+Name)
	}
	for _, ns := range namespaces {
		left = append(left, "network namespace "+ns)
	}
	cgroups, _ := filepath.Glob("/sys/fs/cgroup/*/" + Name)
	nodeCgroups, _ := filepath.Glob("/sys/fs/cgroup/*/" + Name + "-node[0-9]")
	cgroups = append(cgroups, nodeCgroups...)
	for _, cg := range cgroups {
		left = append(left, "cgroup "+cg)
	}
	if mi, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, line := range strings.Split(string(mi), "\n") {
			if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
				left = append(left, "mount "+f[4])
			}
		}
	}
	// Processes started from the state directory's binaries or with its paths in argv.
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if cmdline := strings.ReplaceAll(string(b), "\x00", " "); strings.Contains(cmdline, dir+"/") {
			left = append(left, "process "+filepath.Base(filepath.Dir(p))+": "+cmdline)
		}
	}
	return left
}

func clusterDir() string {
	if d := os.Getenv("CLUSTER_DIR"); d != "" {
		return d
	}
	return "/tmp/widget-cluster"
}

// acquireLock takes the machine-wide cluster lock, waiting up to timeout.
func acquireLock(logf func(string, ...any), timeout time.Duration) (*os.File, error) {
	f, err := os.OpenFile(lockFile, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", lockFile, err)
	}
	deadline := time.Now().Add(timeout)
	logged := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("locking %s: %w", lockFile, err)
		}
		if time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("another end-to-end cluster held %s for %s", lockFile, timeout)
		}
		if !logged {
			logf("cluster: waiting for another test binary's cluster to go down (%s)", lockFile)
			logged = true
		}
		time.Sleep(time.Second)
	}
}
