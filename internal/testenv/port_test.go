package testenv

import (
	"fmt"
	"net"
	"testing"
)

// FreePort's ports are listenable, under the kernel's ephemeral range (where an outgoing
// connection's source port could take them) and never handed out twice.
func TestFreePort(t *testing.T) {
	first := ephemeralStart()
	seen := map[int]bool{}
	for range 50 {
		port := FreePort(t)
		if port < portLow || port >= first {
			t.Fatalf("port %d is outside %d-%d", port, portLow, first-1)
		}
		if seen[port] {
			t.Fatalf("port %d handed out twice", port)
		}
		seen[port] = true
	}
	for port := range seen {
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			t.Fatalf("port %d: %v", port, err)
		}
		_ = l.Close()
		break
	}
}

// A port some listener holds is never handed out.
func TestFreePortSkipsHeldPorts(t *testing.T) {
	var held []net.Listener
	defer func() {
		for _, l := range held {
			_ = l.Close()
		}
	}()
	taken := map[int]bool{}
	for port := portLow; port < portLow+2000; port++ {
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		held = append(held, l)
		taken[port] = true
	}
	for range 200 {
		if port := FreePort(t); taken[port] {
			t.Fatalf("port %d is held by a listener", port)
		}
	}
}
