package cluster

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CertManagerHealthAddr is where the launcher serves /healthz and /readyz, inside the
// cluster's network namespace.
const CertManagerHealthAddr = "127.0.0.1:9403"

// StartCertManager installs cert-manager's CRDs (bin/cert-manager-crds, without
// cert-manager's webhook, which cannot run here) and starts bin/cert-manager, the launcher of
// its real controllers and cainjector (scripts/tools/cert-manager), next to the cluster. It
// returns once the launcher reports ready; the launcher stops before the cluster goes down
// and logs to Dir/logs/cert-manager.log. On a cluster where it already runs it does nothing.
func (c *Cluster) StartCertManager(tb testing.TB) {
	tb.Helper()
	if _, ok := c.startedNextTo("cert-manager"); ok {
		return
	}
	launcher := filepath.Join(c.Bin, "cert-manager")
	crds := filepath.Join(c.Bin, "cert-manager-crds")
	for _, p := range []string{launcher, crds} {
		if _, err := os.Stat(p); err != nil {
			tb.Fatalf("cluster: %s missing: run scripts/toolchain.sh cert-manager (make tools)", p)
		}
	}
	// Server-side: the Certificate CRD is too large for client-side apply's annotation.
	c.Kubectl(tb, "apply", "--server-side", "--force-conflicts", "-f", crds)
	c.Kubectl(tb, "wait", "--for=condition=Established", "--timeout=60s",
		"crd/certificates.cert-manager.io", "crd/certificaterequests.cert-manager.io",
		"crd/issuers.cert-manager.io", "crd/clusterissuers.cert-manager.io")
	c.Kubectl(tb, "create", "namespace", "cert-manager")

	start := time.Now()
	exited := c.startNextTo(tb, "cert-manager", launcher,
		"--kubeconfig", c.Kubeconfig, "--health-addr", CertManagerHealthAddr, "--cluster-resource-namespace", "cert-manager")
	c.waitHTTP(tb, "cert-manager", "http://"+CertManagerHealthAddr+"/readyz", 60*time.Second, exited)
	c.markStarted("cert-manager", true)
	tb.Logf("cluster: cert-manager controllers and cainjector ready in %s", time.Since(start).Round(100*time.Millisecond))
}
