package cluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"
	"syscall"
)

// DialContext opens a connection from inside the cluster's network namespace, where the
// apiserver, the pods and the Service ClusterIPs are. A socket stays in the namespace it
// was created in, so only its creation needs to happen there: on an OS thread locked to
// this goroutine, moved into the namespace with setns(2) and moved back before it is
// unlocked. If moving back fails the thread stays locked and the runtime ends it with the
// goroutine, so no other goroutine ever runs in the namespace. Addresses must be IPs
// (nothing is resolved inside).
func (c *Cluster) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return dialFrom(ctx, c.NetNS, network, addr)
}

// DialContext opens a connection from inside the node's network namespace, as its pods'
// traffic leaves it: through its kube-proxy's rules and its routes (see Cluster.DialContext).
func (n Node) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return dialFrom(ctx, n.NetNS, network, addr)
}

func dialFrom(ctx context.Context, netns, network, addr string) (net.Conn, error) {
	type result struct {
		conn net.Conn
		err  error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		conn, restored, err := dialIn(ctx, netns, network, addr)
		if restored {
			runtime.UnlockOSThread()
		}
		done <- result{conn, err}
	}()
	r := <-done
	return r.conn, r.err
}

func dialIn(ctx context.Context, netns, network, addr string) (conn net.Conn, restored bool, err error) {
	orig, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return nil, true, fmt.Errorf("opening this thread's network namespace: %w", err)
	}
	defer orig.Close()
	target, err := os.Open(netns)
	if err != nil {
		return nil, true, fmt.Errorf("opening the cluster's network namespace (is the cluster up?): %w", err)
	}
	defer target.Close()
	if err := setns(target); err != nil {
		return nil, true, fmt.Errorf("entering %s: %w", netns, err)
	}
	var d net.Dialer
	conn, err = d.DialContext(ctx, network, addr)
	return conn, setns(orig) == nil, err
}

func setns(f *os.File) error {
	if _, _, errno := syscall.RawSyscall(sysSetns, f.Fd(), syscall.CLONE_NEWNET, 0); errno != 0 {
		return errno
	}
	return nil
}
