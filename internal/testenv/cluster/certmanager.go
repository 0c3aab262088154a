package cluster

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

// CertManagerHealthAddr is where the launcher serves /healthz and /readyz, inside the
// cluster's network namespace.
const CertManagerHealthAddr = "127.0.0.1:9403"

// StartCertManager installs cert-manager's CRDs (bin/cert-manager-crds, without
// cert-manager's webhook, which cannot run here) and starts bin/cert-manager, the launcher of
// its real controllers and cainjector (scripts/tools/cert-manager), next to the cluster
// (scripts/local-cluster.sh cert-manager). It returns once the launcher reports ready; the
// launcher goes down with the cluster and logs to Dir/logs/cert-manager.log. On a cluster
// where it already runs it does nothing.
func (c *Cluster) StartCertManager(tb testing.TB) {
	tb.Helper()
	if _, ok := c.startedNextTo("cert-manager"); ok {
		return
	}
	start := time.Now()
	if out, err := c.script(context.Background(), "cert-manager"); err != nil {
		tb.Fatalf("cluster: scripts/local-cluster.sh cert-manager: %v\n%s\n(log: %s)", err, out,
			filepath.Join(c.Dir, "logs", "cert-manager.log"))
	}
	c.markStarted("cert-manager", true)
	tb.Logf("cluster: cert-manager controllers and cainjector ready in %s", time.Since(start).Round(100*time.Millisecond))
}

// RestartCertManager stops cert-manager's launcher and starts it again with feature gates
// ("" for cert-manager's defaults), e.g. "CAInjectorMerging=false" for a cainjector that
// replaces a caBundle instead of merging a new CA into it.
func (c *Cluster) RestartCertManager(tb testing.TB, featureGates string) {
	tb.Helper()
	if out, err := c.script(context.Background(), "cert-manager-stop"); err != nil {
		tb.Fatalf("cluster: scripts/local-cluster.sh cert-manager-stop: %v\n%s", err, out)
	}
	if out, err := c.script(context.Background(), "cert-manager", featureGates); err != nil {
		tb.Fatalf("cluster: scripts/local-cluster.sh cert-manager %s: %v\n%s", featureGates, err, out)
	}
	c.markStarted("cert-manager", true)
	tb.Logf("cluster: cert-manager restarted (feature gates %q)", featureGates)
}
