package testenv

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"testing"
)

// Ports handed to listeners that start later are picked below the kernel's ephemeral range.
// A port the kernel hands out for ":0" is also one it hands out as the source port of an
// outgoing connection (every client of the apiserver and etcd here makes them), so the
// listener started a second later can find it taken: CI once lost a manager to exactly that
// ("exited before it was ready"). Ports under the range are only taken by listeners.
const (
	portLow  = 20000 // above the well-known and most registered ports
	portHigh = 32767 // the default ephemeral range starts at 32768
)

var (
	portMu  sync.Mutex
	handed  = map[int]bool{} // this test binary never hands out a port twice
	portsRN = rand.New(rand.NewPCG(uint64(os.Getpid()), rand.Uint64()))
)

// FreePort returns a loopback port no listener holds now, outside the ephemeral range and
// never handed out before by this test binary.
func FreePort(t testing.TB) int {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

func freePort() (int, error) {
	portMu.Lock()
	defer portMu.Unlock()
	low, high := portLow, ephemeralStart()-1
	if high > portHigh || high <= low {
		high = portHigh
	}
	for range 200 {
		port := low + portsRN.IntN(high-low+1)
		if handed[port] {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue // another process listens there
		}
		_ = l.Close()
		handed[port] = true
		return port, nil
	}
	return 0, fmt.Errorf("testenv: no free loopback port in %d-%d after 200 tries", low, high)
}

// ephemeralStart reads the first port of the kernel's ephemeral range (32768 by default).
func ephemeralStart() int {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return portHigh + 1
	}
	var first, last int
	if _, err := fmt.Sscan(string(data), &first, &last); err != nil {
		return portHigh + 1
	}
	return first
}
