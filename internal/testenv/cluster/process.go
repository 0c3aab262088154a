package cluster

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
