//go:build !linux

package cluster

import (
	"context"
	"errors"
	"net"
)

// DialContext needs Linux network namespaces.
func (c *Cluster) DialContext(context.Context, string, string) (net.Conn, error) {
	return nil, errors.New("the end-to-end cluster needs Linux")
}

// DialContext needs Linux network namespaces.
func (Node) DialContext(context.Context, string, string) (net.Conn, error) {
	return nil, errors.New("the end-to-end cluster needs Linux")
}
