package widgetenv

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/widgetry/widget-operator/internal/chart/helmtemplate"
	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/testenv"
	"github.com/widgetry/widget-operator/internal/testenv/prereq"
	"github.com/widgetry/widget-operator/internal/testenv/testcerts"
	"github.com/widgetry/widget-operator/internal/webhook"
)

// Namespace is widget-manager's namespace in these tests (catalog entries, the Lease).
const Namespace = "widget-system"

// Operator runs widget-manager against a testenv control plane the way the chart runs it in
// a cluster: a serving certificate from a CA made by the test, the Widget CRD of a stage
// converting through the manager's /convert, and mutating and validating webhook
// configurations pointing at it. Managers are real processes (the binary built from
// cmd/widget-manager), so tests can stop, kill and restart them.
type Operator struct {
	Env *testenv.Env
	// CA signed the serving certificate and is the caBundle of the CRD and webhooks.
	CA *testcerts.CA
	// CertDir holds tls.crt and tls.key; replace them to rotate the certificate.
	CertDir string
	// WebhookPort is the port the apiserver calls (the first manager's).
	WebhookPort int
}

// Setup creates the manager's namespace, a serving certificate for 127.0.0.1, the Widget CRD
// at stage converting through https://127.0.0.1:<WebhookPort>/convert, and the webhook
// configurations. env must use Scheme().
func Setup(t testing.TB, env *testenv.Env, stage crd.Stage) *Operator {
	t.Helper()
	o := &Operator{Env: env, CA: testcerts.NewCA(t, "widget-operator-test-ca"), CertDir: t.TempDir(), WebhookPort: testenv.FreePort(t)}
	o.CA.Issue(t, "127.0.0.1", "localhost").WriteDir(t, o.CertDir)
	if err := env.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}); err != nil {
		t.Fatalf("widgetenv: create namespace %s: %v", Namespace, err)
	}
	env.InstallCRDs(t, o.CRD(t, stage))
	// Before the webhook configurations: its readiness probe is a write no webhook answers.
	InstallWarningsPolicy(t, env)
	o.installWebhookConfigurations(t)
	return o
}

// WarningsPolicy is the chart's template of the ValidatingAdmissionPolicy that warns about
// risky Widgets (and its binding).
const WarningsPolicy = "templates/validatingadmissionpolicy-warnings.yaml"

// InstallWarningsPolicy creates the chart's warnings policy and binding, as helm renders them.
func InstallWarningsPolicy(tb testing.TB, env *testenv.Env) {
	tb.Helper()
	root := prereq.RepoRoot(tb)
	out, err := helmtemplate.Render(helmtemplate.Options{Helm: prereq.Tool(tb, "helm3"), Chart: filepath.Join(root, "charts", "widget-operator"), ShowOnly: []string{WarningsPolicy}})
	if err != nil {
		tb.Fatalf("widgetenv: %v", err)
	}
	objs, err := helmtemplate.Parse(out)
	if err != nil {
		tb.Fatalf("widgetenv: %v", err)
	}
	if len(objs) != 2 {
		tb.Fatalf("widgetenv: %s rendered %d objects, want the policy and its binding", WarningsPolicy, len(objs))
	}
	for _, obj := range objs {
		if err := env.Client.Create(context.Background(), obj); err != nil {
			tb.Fatalf("widgetenv: create %s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
	}
	// The apiserver applies a new policy once its informer has it: wait until a dry-run
	// create through the storage version (no conversion, no webhook needed) is warned.
	live := &apiextensionsv1.CustomResourceDefinition{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: crd.WidgetName}, live); err != nil {
		tb.Fatalf("widgetenv: %v", err)
	}
	storage := ""
	for _, v := range live.Spec.Versions {
		if v.Storage {
			storage = v.Name
		}
	}
	seen := &warningRecorder{}
	cfg := rest.CopyConfig(env.Config)
	cfg.WarningHandler = seen
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	probe := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "widgetry.io/" + storage, "kind": "Widget",
		"metadata": map[string]any{"namespace": Namespace, "name": "warnings-probe"}, "spec": map[string]any{"image": "probe"}}}
	testenv.Eventually(tb, 30*time.Second, "the warnings policy in effect", func() error {
		if err := c.Create(context.Background(), probe.DeepCopy(), client.DryRunAll); err != nil {
			return err
		}
		if !seen.saw("has no tag") {
			return fmt.Errorf("a dry-run create of an untagged image was not warned")
		}
		return nil
	})
}

// warningRecorder keeps the warnings the apiserver answers with.
type warningRecorder struct {
	mu   sync.Mutex
	seen []string
}

func (w *warningRecorder) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen = append(w.seen, text)
}

func (w *warningRecorder) saw(s string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, text := range w.seen {
		if strings.Contains(text, s) {
			return true
		}
	}
	return false
}

// CRD returns the Widget CRD at stage with the conversion webhook of this Operator.
func (o *Operator) CRD(t testing.TB, stage crd.Stage) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	c := crd.WithWebhookConversion(crd.Widget(), apiextensionsv1.WebhookClientConfig{
		URL: ptr.To(o.url(webhook.ConvertPath)), CABundle: o.CA.PEM})
	if err := crd.ApplyStageFlags(c, stage); err != nil {
		t.Fatal(err)
	}
	return c
}

// SetStage changes the live CRD's versions to those of stage, as helm upgrade would (it
// neither migrates nor trims storedVersions).
func (o *Operator) SetStage(t testing.TB, stage crd.Stage) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		live := &apiextensionsv1.CustomResourceDefinition{}
		if err := o.Env.Client.Get(ctx, client.ObjectKey{Name: crd.WidgetName}, live); err != nil {
			return false, err
		}
		if err := crd.ApplyStageFlags(live, stage); err != nil {
			return false, err
		}
		if err := o.Env.Client.Update(ctx, live); err != nil {
			if apierrors.IsConflict(err) {
				return false, nil
			}
			return false, err
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("widgetenv: set the CRD to stage %s: %v", stage, err)
	}
}

func (o *Operator) url(path string) string {
	return "https://127.0.0.1:" + strconv.Itoa(o.WebhookPort) + path
}

func (o *Operator) installWebhookConfigurations(t testing.TB) {
	t.Helper()
	installWebhookConfigurations(t, o.Env.Client, o.url, o.CA.PEM)
}

// installWebhookConfigurations registers the mutating and validating webhooks for Widget
// creates and updates in both versions, as the chart does, at url(path), trusting caPEM.
func installWebhookConfigurations(tb testing.TB, c client.Client, url func(path string) string, caPEM []byte) {
	tb.Helper()
	rules := []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
		Rule: admissionregistrationv1.Rule{APIGroups: []string{"widgetry.io"}, APIVersions: []string{"v1alpha1", "v1"},
			Resources: []string{"widgets"}, Scope: ptr.To(admissionregistrationv1.NamespacedScope)},
	}}
	sideEffects := admissionregistrationv1.SideEffectClassNone
	config := func(path string) admissionregistrationv1.WebhookClientConfig {
		return admissionregistrationv1.WebhookClientConfig{URL: ptr.To(url(path)), CABundle: caPEM}
	}
	mutating := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "widget-operator"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name: "mutate.widgets.widgetry.io", Rules: rules, SideEffects: &sideEffects,
			FailurePolicy: ptr.To(admissionregistrationv1.Fail), MatchPolicy: ptr.To(admissionregistrationv1.Equivalent),
			AdmissionReviewVersions: []string{"v1"}, TimeoutSeconds: ptr.To[int32](10), ClientConfig: config(webhook.MutatePath),
		}},
	}
	validating := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "widget-operator"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: "validate.widgets.widgetry.io", Rules: rules, SideEffects: &sideEffects,
			FailurePolicy:           ptr.To(admissionregistrationv1.Ignore), // as the chart's MatchPolicy: ptr.To(admissionregistrationv1.Equivalent),
			AdmissionReviewVersions: []string{"v1"}, TimeoutSeconds: ptr.To[int32](10), ClientConfig: config(webhook.ValidatePath),
		}},
	}
	for _, obj := range []client.Object{mutating, validating} {
		if err := c.Create(context.Background(), obj); err != nil {
			tb.Fatalf("widgetenv: create %T: %v", obj, err)
		}
	}
}

// Manager is one widget-manager process.
type Manager struct {
	*testenv.Process
	// WebhookPort, HealthPort and MetricsPort are its listening ports on 127.0.0.1.
	WebhookPort, HealthPort, MetricsPort int
}

// ManagerOptions tune one manager process.
type ManagerOptions struct {
	// WebhookPort defaults to the Operator's (the one the apiserver calls); another replica
	// needs its own.
	WebhookPort int
	// Args are extra flags, e.g. "--drain-delay=2s".
	Args []string
	// NoWait returns before the manager is ready.
	NoWait bool
	// Kubeconfig is the identity the manager runs as; empty means the environment's admin.
	Kubeconfig string
	// Env are extra environment variables, e.g. "GOMEMLIMIT=268435456" as the chart sets it.
	Env []string
}

// StartManager starts a widget-manager process and waits until /readyz answers 200. It is
// stopped (SIGTERM) when the test ends, if still running.
func (o *Operator) StartManager(t testing.TB, opts ManagerOptions) *Manager {
	t.Helper()
	if opts.WebhookPort == 0 {
		opts.WebhookPort = o.WebhookPort
	}
	// A port taken between FreePort and the bind is the harness's race, not the manager's
	// fault: the health and metrics ports are picked again, a few times.
	for attempt := 1; ; attempt++ {
		m := o.startManager(t, opts)
		if opts.NoWait {
			return m
		}
		err := m.waitReady(60 * time.Second)
		if err == nil {
			return m
		}
		if attempt < testenv.PortAttempts && m.LogContains("address already in use") {
			t.Logf("widgetenv: widget-manager found a port taken (attempt %d); starting it on new ports", attempt)
			continue
		}
		t.Fatal(err)
	}
}

func (o *Operator) startManager(t testing.TB, opts ManagerOptions) *Manager {
	t.Helper()
	m := &Manager{WebhookPort: opts.WebhookPort, HealthPort: testenv.FreePort(t), MetricsPort: testenv.FreePort(t)}
	args := append([]string{
		"--namespace=" + Namespace,
		"--webhook-port=" + strconv.Itoa(m.WebhookPort),
		"--webhook-cert-dir=" + o.CertDir,
		"--health-probe-bind-address=127.0.0.1:" + strconv.Itoa(m.HealthPort),
		"--metrics-bind-address=127.0.0.1:" + strconv.Itoa(m.MetricsPort),
		"--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=1s",
		"--drain-delay=1s",
		// Readiness judges the certificate by the CRD's and these configurations' caBundles.
		"--webhook-configuration-name=widget-operator",
		// The apiserver's idle connections would hold a stopping manager for up to 90 s.
		"--connection-drain-timeout=3s",
	}, opts.Args...)
	log := o.Env.CreateLog(t, fmt.Sprintf("widget-manager-%d-%d", m.WebhookPort, time.Now().UnixNano()))
	kubeconfig := o.Env.Kubeconfig
	if opts.Kubeconfig != "" {
		kubeconfig = opts.Kubeconfig
	}
	proc, err := testenv.StartProcess("widget-manager", ManagerBinary(t), args, append([]string{"KUBECONFIG=" + kubeconfig}, opts.Env...), log)
	if err != nil {
		t.Fatalf("widgetenv: %v", err)
	}
	m.Process = proc
	t.Cleanup(func() { m.Stop(t, 30*time.Second) })
	return m
}

// WaitReady polls /readyz until it answers 200.
func (m *Manager) WaitReady(t testing.TB, timeout time.Duration) {
	t.Helper()
	if err := m.waitReady(timeout); err != nil {
		t.Fatal(err)
	}
}

// waitReady polls /readyz until it answers 200; an error carries the end of the manager's
// log, so that a summary which keeps only the failure line still says why.
func (m *Manager) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for !m.Ready() {
		select {
		case <-m.Exited():
			return fmt.Errorf("widgetenv: widget-manager exited before it was ready (%w); log %s ends:\n%s",
				m.ExitErr(), m.LogFile, m.LogTail(10))
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("widgetenv: widget-manager not ready after %s; log %s ends:\n%s",
				timeout, m.LogFile, m.LogTail(10))
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil
}

// Ready reports whether /readyz answers 200.
func (m *Manager) Ready() bool {
	resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(m.HealthPort) + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// WebhookClient is an HTTPS client that trusts the Operator's CA.
func (o *Operator) WebhookClient() *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: o.CA.CertPool(), MinVersion: tls.VersionTLS12}}}
}

var (
	buildMu sync.Mutex
	built   = map[string]string{}
)

// ManagerBinary builds cmd/widget-manager once per test binary and returns its path.
func ManagerBinary(t testing.TB) string { return Binary(t, "widget-manager") }

// Binary builds cmd/<name> once per test binary and returns its path.
func Binary(t testing.TB, name string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if path, ok := built[name]; ok {
		return path
	}
	dir, err := os.MkdirTemp("", name+"-")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-o", path, "./cmd/"+name)
	cmd.Dir = prereq.RepoRoot(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("widgetenv: go build ./cmd/%s: %v\n%s", name, err, out)
	}
	built[name] = path
	return path
}

// MetricFamilies scrapes the manager's /metrics with token and parses them, as
// testenv.APIServerMetrics parses the apiserver's; anything but 200 fails the test.
func (m *Manager) MetricFamilies(t testing.TB, token string) map[string]*dto.MetricFamily {
	t.Helper()
	code, body := m.ScrapeMetrics(token)
	if code != http.StatusOK {
		t.Fatalf("widgetenv: the manager's /metrics: HTTP %d: %.300s", code, body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("widgetenv: parse the manager's /metrics: %v", err)
	}
	return families
}

// ScrapeMetrics GETs the manager's /metrics with token ("" for none) and returns the status
// code and body; a failed connection is code 0 with the error as the body (the metrics
// server may start a moment after the replica is Ready: callers poll).
func (m *Manager) ScrapeMetrics(token string) (int, string) {
	insecure := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // self-signed metrics certificate
	defer insecure.CloseIdleConnections()                                                                                                   // the metrics listener caps connections per source
	req, _ := http.NewRequest(http.MethodGet, "https://127.0.0.1:"+strconv.Itoa(m.MetricsPort)+"/metrics", nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := insecure.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}
