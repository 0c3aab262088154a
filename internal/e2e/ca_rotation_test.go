//go:build e2e

package e2e

import (
	"context"
	"crypto/x509"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/widgetry/widget-operator/internal/cabundle"
	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/scheme"
	"github.com/widgetry/widget-operator/internal/testenv"
	"github.com/widgetry/widget-operator/internal/testenv/cluster"
)

// trustSampler measures, per replica, how long it served a certificate that the caBundle then
// in the CRD did not trust: each sample reads the bundle, asks every running manager pod for
// its chain, and reads the bundle again; a pod is counted untrusted only when neither read
// trusts its chain (the bundle may change between the reads, and either could be the one the
// apiserver used). The time until the next sample (or the end) is charged to the verdict.
// Nothing is dropped: a sample that cannot read the bundle or list the pods is counted as
// errored (and fails the check that reads the sampler), and a Running pod whose handshake
// fails, or that is Ready and unreachable, is untrusted: the apiserver could not use it.
type trustSampler struct {
	c         *cluster.Cluster
	k         client.Client
	namespace string
	host      string // the name the apiserver dials

	mu        sync.Mutex
	untrusted map[string]time.Duration
	samples   int
	errored   []string // why each errored sample failed
	started   time.Time
	first     map[string]string // the first refusal seen, by pod
	trace     []string          // one line per sample: the bundle's CAs and what each pod serves
}

func newTrustSampler(c *cluster.Cluster, k client.Client, namespace, releaseName string) *trustSampler {
	return &trustSampler{c: c, k: k, namespace: namespace, host: releaseName + "-webhook." + namespace + ".svc",
		untrusted: map[string]time.Duration{}, first: map[string]string{}}
}

// run samples until ctx ends; the verdict of the last sample is charged until then.
func (s *trustSampler) run(ctx context.Context) {
	last := time.Now()
	s.mu.Lock()
	s.started = last
	s.mu.Unlock()
	var pending []string // pods untrusted at the previous sample
	charge := func() {
		now := time.Now()
		s.mu.Lock()
		for _, p := range pending {
			s.untrusted[p] += now.Sub(last)
		}
		s.mu.Unlock()
		last = now
	}
	for ctx.Err() == nil {
		charge()
		pending = s.sample(ctx)
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
	charge()
}

// fail records an errored sample, unless the sampler is being stopped.
func (s *trustSampler) fail(ctx context.Context, what string, err error) {
	if ctx.Err() != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.errored = append(s.errored, time.Now().Format("15:04:05.000")+" "+what+": "+err.Error())
}

// sample returns the pods whose served chain neither bundle read trusts.
func (s *trustSampler) sample(ctx context.Context) []string {
	before, err := s.bundle(ctx)
	if err != nil {
		s.fail(ctx, "reading the caBundle", err)
		return nil
	}
	type served struct {
		pod   string
		chain []*x509.Certificate
	}
	var chains []served
	// Listed here, not with managerPodsOf: a sample that cannot list is counted as errored,
	// not fatal (this runs beside the test's goroutine).
	pods := &corev1.PodList{}
	if err := s.k.List(ctx, pods, client.InNamespace(s.namespace), client.MatchingLabels{"app.kubernetes.io/component": "webhook"}); err != nil {
		s.fail(ctx, "listing the webhook pods", err)
		return nil
	}
	unusable := map[string]string{} // pods the apiserver could not use, and why
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
			continue
		}
		chain, err := servedChain(s.c, p.Status.PodIP)
		switch {
		case err == nil:
			chains = append(chains, served{p.Name, chain})
		case strings.HasPrefix(err.Error(), "handshake") || podReady(&p):
			// A failed handshake, or a Ready pod (one the Service sends to) that does not
			// answer, fails every webhook call the apiserver makes to it.
			unusable[p.Name] = err.Error()
		}
	}
	after, err := s.bundle(ctx)
	if err != nil {
		s.fail(ctx, "reading the caBundle", err)
		return nil
	}
	var untrusted []string
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples++
	line := time.Now().Format("15:04:05.000") + " bundle " + caSerials(before) + "→" + caSerials(after)
	for _, sv := range chains {
		line += fmt.Sprintf(" %s:%s", sv.pod[len(sv.pod)-5:], sv.chain[0].SerialNumber.Text(16)[:8])
	}
	for _, pod := range slices.Sorted(maps.Keys(unusable)) {
		line += fmt.Sprintf(" %s:%s", pod[len(pod)-5:], unusable[pod])
		untrusted = append(untrusted, pod)
		if _, seen := s.first[pod]; !seen {
			s.first[pod] = unusable[pod]
		}
	}
	s.trace = append(s.trace, line)
	for _, sv := range chains {
		errBefore, errAfter := verifyWith(sv.chain, before, s.host), verifyWith(sv.chain, after, s.host)
		if errBefore != nil && errAfter != nil {
			untrusted = append(untrusted, sv.pod)
			if _, seen := s.first[sv.pod]; !seen {
				s.first[sv.pod] = errAfter.Error()
			}
		}
	}
	return untrusted
}

func (s *trustSampler) bundle(ctx context.Context) ([]byte, error) {
	live := &apiextensionsv1.CustomResourceDefinition{}
	if err := s.k.Get(ctx, client.ObjectKey{Name: crd.WidgetName}, live); err != nil {
		return nil, err
	}
	if cv := live.Spec.Conversion; cv != nil && cv.Webhook != nil && cv.Webhook.ClientConfig != nil {
		return cv.Webhook.ClientConfig.CABundle, nil
	}
	return nil, fmt.Errorf("the CRD has no conversion webhook")
}

// caSerials abbreviates the serials of a bundle's CAs, for the trace.
func caSerials(bundle []byte) string {
	certs, err := cabundle.Parse(bundle)
	if err != nil {
		return "unparsable"
	}
	var out []string
	for _, c := range certs {
		out = append(out, c.SerialNumber.Text(16)[:8])
	}
	return "[" + strings.Join(out, ",") + "]"
}

// verifyWith verifies a served chain as the apiserver does, against bundle, for host.
func verifyWith(chain []*x509.Certificate, bundle []byte, host string) error {
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(bundle) {
		return fmt.Errorf("an empty caBundle")
	}
	intermediates := x509.NewCertPool()
	for _, c := range chain[1:] {
		intermediates.AddCert(c)
	}
	_, err := chain[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: intermediates, DNSName: host,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	return err
}

// podReady reports whether the pod's Ready condition is true.
func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// check fails t when the sampler's record cannot be trusted: an errored sample (its interval
// would otherwise go uncharged), or fewer samples than one per 2 s of its run.
func (s *trustSampler) check(t *testing.T) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.errored) > 0 {
		t.Errorf("the trust sampler could not take %d of its samples; first: %s", len(s.errored), s.errored[0])
	}
	ran := time.Since(s.started)
	if want := int(ran / (2 * time.Second)); s.samples < want {
		t.Errorf("the trust sampler took %d samples in %s, fewer than one per 2 s (%d): its verdicts cover too little of the rotation",
			s.samples, ran.Round(100*time.Millisecond), want)
	}
}

// worst is the longest untrusted window of any pod, and a line per pod for the report.
func (s *trustSampler) worst() (time.Duration, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var worst time.Duration
	var lines []string
	for _, pod := range slices.Sorted(maps.Keys(s.untrusted)) {
		d := s.untrusted[pod]
		worst = max(worst, d)
		lines = append(lines, fmt.Sprintf("%s %s (%s)", pod, d.Round(100*time.Millisecond), s.first[pod]))
	}
	return worst, fmt.Sprintf("%d samples; untrusted: %s", s.samples, strings.Join(lines, "; "))
}

// caRotation is what rotateCA measured.
type caRotation struct {
	// Served: from the CA's deletion until every replica serves a leaf of the new CA.
	Served time.Duration
	// OldCALeft: until the CRD's caBundle holds the new CA alone (0 when not awaited).
	OldCALeft time.Duration
	// Untrusted is the longest time a replica served a certificate the CRD's bundle did
	// not trust; Samples describes every pod's.
	Untrusted time.Duration
	Samples   string
	// UntrustedByPod is every pod's untrusted time (pods never untrusted are absent).
	UntrustedByPod map[string]time.Duration
	// Trace is the sampler's record, logged when a check fails.
	Trace []string
}

// chartCA is the chart's own CA Certificate in namespace.
func chartCA(namespace string) caCertificate {
	return caCertificate{Namespace: namespace, Name: release + "-ca", Secret: release + "-ca"}
}

// caCertificate names the cert-manager Certificate of the issuing CA: the chart's own
// (<release>-ca in the release namespace) or an issuerRef's.
type caCertificate struct{ Namespace, Name, Secret string }

// rotateCA forces a rotation of the issuing CA the way an expiring CA is rotated: the CA's
// Secret is deleted (cert-manager issues a new CA with a new key), then the serving
// certificate's (cert-manager issues a leaf of the new CA), and waits until every replica
// serves it; with awaitOverlapEnd, also until the bundle has dropped the old CA. A trust
// sampler runs throughout.
func rotateCA(t *testing.T, c *cluster.Cluster, k client.Client, namespace, releaseName string, ca caCertificate, awaitOverlapEnd bool) caRotation {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	sampler := newTrustSampler(c, k, namespace, releaseName)
	done := make(chan struct{})
	go func() { sampler.run(ctx); close(done) }()
	defer func() { stop(); <-done }()

	reissue := func(namespace, secret string) *corev1.Secret {
		t.Helper()
		old := &corev1.Secret{}
		if err := k.Get(ctx, client.ObjectKey{Namespace: namespace, Name: secret}, old); err != nil {
			t.Fatal(err)
		}
		c.Kubectl(t, "-n", namespace, "delete", "secret", secret)
		cur := &corev1.Secret{}
		testenv.Eventually(t, 2*time.Minute, "Secret "+secret+" reissued", func() error {
			if err := k.Get(ctx, client.ObjectKey{Namespace: namespace, Name: secret}, cur); err != nil {
				return err
			}
			if len(cur.Data["tls.crt"]) == 0 || string(cur.Data["tls.crt"]) == string(old.Data["tls.crt"]) {
				return fmt.Errorf("not reissued yet")
			}
			return nil
		})
		return cur
	}
	s := time.Now()
	newCA := reissue(ca.Namespace, ca.Secret)
	c.Kubectl(t, "-n", ca.Namespace, "wait", "--for=condition=Ready", "certificate/"+ca.Name, "--timeout=2m")
	serving := reissue(namespace, releaseName+"-serving-cert")
	c.Kubectl(t, "-n", namespace, "wait", "--for=condition=Ready", "certificate", "--all", "--timeout=2m")
	if string(serving.Data["ca.crt"]) != string(newCA.Data["tls.crt"]) {
		t.Fatalf("the reissued serving certificate's ca.crt is not the new CA")
	}
	want := secretSerial(t, serving)
	testenv.Eventually(t, 4*time.Minute, "every replica serves serial "+want+" (signed by the new CA)", func() error {
		for pod, serial := range servedSerials(t, c, k, namespace) {
			if serial != want {
				return fmt.Errorf("%s serves %s", pod, serial)
			}
		}
		return nil
	})
	r := caRotation{Served: time.Since(s)}
	if awaitOverlapEnd {
		testenv.Eventually(t, 2*time.Minute, "the CRD's caBundle holds the new CA alone", func() error {
			b, err := sampler.bundle(ctx)
			if err != nil {
				return err
			}
			certs, err := cabundle.Parse(b)
			if err != nil {
				return err
			}
			if len(certs) != 1 || string(cabundle.Encode(certs)) != string(newCA.Data["tls.crt"]) {
				return fmt.Errorf("the bundle holds %d CAs", len(certs))
			}
			return nil
		})
		r.OldCALeft = time.Since(s)
	}
	time.Sleep(3 * time.Second) // a last few samples after the swap
	stop()
	<-done
	sampler.check(t)
	r.Untrusted, r.Samples = sampler.worst()
	r.UntrustedByPod = maps.Clone(sampler.untrusted)
	r.Trace = sampler.trace
	return r
}

// replacingCAInjector runs cert-manager, for the rest of the test, with CAInjectorMerging off:
// its cainjector then replaces a caBundle with the source's CA, as cert-manager did before
// that gate (and does wherever it is turned off), instead of merging a new CA in and keeping
// the old one until it expires. The chart's overlap must hold on its own there; with merging,
// cainjector would mask it.
func replacingCAInjector(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	c.RestartCertManager(t, "CAInjectorMerging=false")
	t.Cleanup(func() { c.RestartCertManager(t, "") })
}

// certManagedCluster is the package's cluster with the operator's image imported and
// cert-manager running; controller-runtime's clients log nothing (the tests' reports are
// their output).
func certManagedCluster(t *testing.T) *cluster.Cluster {
	t.Helper()
	return certManagedClusterOf(t, 1)
}

// certManagedClusterOf is certManagedCluster on nodes nodes.
func certManagedClusterOf(t *testing.T, nodes int) *cluster.Cluster {
	t.Helper()
	ctrllog.SetLogger(logr.Discard())
	c := cluster.StartNodes(t, nodes)
	c.ImportOperatorImage(t)
	c.StartCertManager(t)
	return c
}

// restrictedNamespace creates a namespace that enforces Pod Security restricted, as the
// chart's README asks of the release namespace.
func restrictedNamespace(t *testing.T, c *cluster.Cluster, name string) {
	t.Helper()
	c.Kubectl(t, "create", "namespace", name)
	c.Kubectl(t, "label", "namespace", name, "pod-security.kubernetes.io/enforce=restricted")
}

// installForRotation installs the chart with Helm 4 in a new restricted namespace with the
// values set (key=value each), removes it and the CRD when the test ends, and returns a client
// that ignores warnings.
func installForRotation(t *testing.T, c *cluster.Cluster, namespace string, set ...string) client.Client {
	t.Helper()
	restrictedNamespace(t, c, namespace)
	helm := func(args ...string) string {
		return c.Run(t, filepath.Join(c.Bin, "helm4"), append(args, "-n", namespace)...)
	}
	args := []string{"install", release, filepath.Join(c.Root, "charts", release), "--set", "image.tag=dev", "--wait", "--timeout", "5m"}
	for _, kv := range set {
		args = append(args, "--set", kv)
	}
	helm(args...)
	t.Cleanup(func() {
		helm("uninstall", release, "--wait", "--timeout", "5m")
		c.Kubectl(t, "delete", "crd", crd.WidgetName, "--ignore-not-found")
	})
	cfg := rest.CopyConfig(c.Config)
	cfg.WarningHandlerWithContext = rest.NoWarnings{}
	k, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestCARotation runs the CA rotation's controls one after the other on one cluster, under
// the same replacing cainjector as the production proof: the negative control without the
// overlap, then the overlap under certManager.issuerRef. Each installs in a namespace of its
// own and removes the release and the CRD when it ends.
func TestCARotation(t *testing.T) {
	c := certManagedCluster(t)
	replacingCAInjector(t, c)
	if !t.Run("WithoutOverlap", func(t *testing.T) { caRotationWithoutOverlap(t, c) }) {
		return
	}
	t.Run("WithIssuerRef", func(t *testing.T) { caRotationWithIssuerRef(t, c) })
}

// caRotationWithoutOverlap is the CA rotation step's negative control: the same rotation
// with certManager.caBundleOverlap=false, where cainjector injects the serving Certificate's
// CA directly, under the same replacing cainjector as the production proof. The replicas
// then serve, for a while, a leaf the CRD's bundle no longer trusts; the sampler must see
// that window, or the production proof's zero would prove nothing.
func caRotationWithoutOverlap(t *testing.T, c *cluster.Cluster) {
	const namespace = "ca-no-overlap"
	k := installForRotation(t, c, namespace, "certManager.caBundleOverlap=false")
	r := rotateCA(t, c, k, namespace, release, chartCA(namespace), false)
	t.Logf("without the overlap: every replica served the new CA's leaf after %s; longest untrusted window %s; %s",
		r.Served.Round(100*time.Millisecond), r.Untrusted.Round(100*time.Millisecond), r.Samples)
	// Each replica serves the old CA's leaf, untrusted, from the injection of the new CA
	// until the kubelet and the reload gate swap its certificate: seconds, not one sample.
	replicas := len(webhookPodsOf(t, k, namespace))
	var long int
	for _, d := range r.UntrustedByPod {
		if d >= 2*time.Second {
			long++
		}
	}
	if replicas == 0 || long < replicas {
		t.Errorf("without the overlap %d of %d replicas served an untrusted certificate for at least 2 s during a CA rotation (%s): the sampler cannot tell the overlap works\n%s",
			long, replicas, r.Samples, strings.Join(r.Trace, "\n"))
	}
}

// caRotationWithIssuerRef: the overlap holds with certManager.issuerRef too. The chart is
// installed with a ClusterIssuer standing in for a company CA (value_sets_test.go's corpCA),
// under a replacing cainjector; that CA is rotated, then the serving certificate: no replica
// serves a certificate the CRD's caBundle does not trust, and the old CA leaves the bundle.
func caRotationWithIssuerRef(t *testing.T, c *cluster.Cluster) {
	applyCorpCA(t, c)
	const namespace = "ca-issuer-ref"
	k := installForRotation(t, c, namespace, "certManager.issuerRef.name=corp-ca", "certManager.issuerRef.kind=ClusterIssuer")
	r := rotateCA(t, c, k, namespace, release, caCertificate{Namespace: "cert-manager", Name: "corp-ca", Secret: "corp-ca"}, true)
	t.Logf("issuerRef CA rotated: every replica served the new CA's leaf after %s, the old CA left the caBundle after %s; longest untrusted window %s; %s",
		r.Served.Round(100*time.Millisecond), r.OldCALeft.Round(100*time.Millisecond), r.Untrusted.Round(100*time.Millisecond), r.Samples)
	if r.Untrusted > 0 {
		t.Errorf("a replica served a certificate the CRD's caBundle did not trust: %s\n%s", r.Samples, strings.Join(r.Trace, "\n"))
	}
}
