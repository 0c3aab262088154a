package apiservers

import (
	"fmt"
	"net/http"
	"time"

	"k8s.io/client-go/rest"
)

// HTTPClient connects with cfg's credentials to any instance, verifying its certificate
// against cfg's CA for one server name (serverName, else cfg's, else the host of cfg's
// server): each request names the instance's own address, which the certificate need not
// list. timeout bounds each request.
func HTTPClient(cfg *rest.Config, serverName string, timeout time.Duration) (*http.Client, error) {
	c := rest.CopyConfig(cfg)
	if serverName != "" {
		c.ServerName = serverName
	} else if c.ServerName == "" {
		u, _, err := rest.DefaultServerUrlFor(cfg)
		if err != nil {
			return nil, fmt.Errorf("read the server URL of the client configuration: %w", err)
		}
		c.ServerName = u.Hostname()
	}
	c.Timeout = timeout
	hc, err := rest.HTTPClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("build the client for the kube-apiserver instances: %w", err)
	}
	return hc, nil
}
