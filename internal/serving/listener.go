package serving

import (
	"net"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// ListenerMetrics count, per listener, the connections open and those refused or kept waiting
// by the caps.
type ListenerMetrics struct {
	open    *prometheus.GaugeVec
	refused *prometheus.CounterVec
	waited  *prometheus.CounterVec
}

// NewListenerMetrics registers the listeners' metrics with reg.
func NewListenerMetrics(reg prometheus.Registerer) (*ListenerMetrics, error) {
	m := &ListenerMetrics{
		open: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "widget_listener_open_connections",
			Help: "Connections open on each of the manager's listeners (webhook, metrics, probes, pprof).",
		}, []string{"listener"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "widget_listener_refused_connections_total",
			Help: "Connections closed as soon as accepted because their source address already held the listener's per-source cap.",
		}, []string{"listener"}),
		waited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "widget_listener_capped_total",
			Help: "Times a listener held its cap of open connections and left the next one waiting in the kernel's backlog.",
		}, []string{"listener"}),
	}
	for _, c := range []prometheus.Collector{m.open, m.refused, m.waited} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Listen caps ln at l.MaxConns connections open and l.MaxConnsPerSource from one source
// address (0: no cap). At the total cap Accept waits for a connection to close, so a burst
// queues in the kernel's backlog rather than failing; past a source's cap a connection is
// closed as soon as accepted, so one client cannot take every slot. m (nil: none) counts both
// under name.
func Listen(ln net.Listener, name string, l Limits, m *ListenerMetrics) net.Listener {
	c := &cappedListener{Listener: ln, name: name, limits: l, metrics: m, bySource: map[string]int{}, closed: make(chan struct{})}
	if l.MaxConns > 0 {
		c.slots = make(chan struct{}, l.MaxConns)
	}
	if m != nil {
		m.open.WithLabelValues(name)
		m.refused.WithLabelValues(name)
		m.waited.WithLabelValues(name)
	}
	return c
}

type cappedListener struct {
	net.Listener
	name      string
	limits    Limits
	metrics   *ListenerMetrics
	slots     chan struct{}
	mu        sync.Mutex
	bySource  map[string]int
	closed    chan struct{}
	closeOnce sync.Once
}

func (c *cappedListener) Accept() (net.Conn, error) {
	for {
		if err := c.takeSlot(); err != nil {
			return nil, err
		}
		conn, err := c.Listener.Accept()
		if err != nil {
			c.freeSlot()
			return nil, err
		}
		source := sourceOf(conn.RemoteAddr())
		c.mu.Lock()
		if c.limits.MaxConnsPerSource > 0 && c.bySource[source] >= c.limits.MaxConnsPerSource {
			c.mu.Unlock()
			_ = conn.Close()
			c.freeSlot()
			if c.metrics != nil {
				c.metrics.refused.WithLabelValues(c.name).Inc()
			}
			continue
		}
		c.bySource[source]++
		c.mu.Unlock()
		if c.metrics != nil {
			c.metrics.open.WithLabelValues(c.name).Inc()
		}
		return &cappedConn{Conn: conn, release: func() { c.release(source) }}, nil
	}
}

// takeSlot waits for room under the total cap, or for the listener to close.
func (c *cappedListener) takeSlot() error {
	if c.slots == nil {
		return nil
	}
	select {
	case c.slots <- struct{}{}:
		return nil
	default:
	}
	if c.metrics != nil {
		c.metrics.waited.WithLabelValues(c.name).Inc()
	}
	select {
	case c.slots <- struct{}{}:
		return nil
	case <-c.closed:
		return net.ErrClosed
	}
}

func (c *cappedListener) freeSlot() {
	if c.slots != nil {
		<-c.slots
	}
}

func (c *cappedListener) release(source string) {
	c.mu.Lock()
	if c.bySource[source]--; c.bySource[source] <= 0 {
		delete(c.bySource, source)
	}
	c.mu.Unlock()
	c.freeSlot()
	if c.metrics != nil {
		c.metrics.open.WithLabelValues(c.name).Dec()
	}
}

func (c *cappedListener) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return c.Listener.Close()
}

// sourceOf is a connection's source address without its port.
func sourceOf(addr net.Addr) string {
	if tcp, ok := addr.(*net.TCPAddr); ok {
		return tcp.IP.String()
	}
	host, _, err := net.SplitHostPort(addr.String())
	if err != nil {
		return addr.String()
	}
	return host
}

// cappedConn gives its slot back once, when closed.
type cappedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *cappedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
