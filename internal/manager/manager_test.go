//go:build envtest

package manager_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/widgetry/widget-operator/api/v1alpha1"
	"github.com/widgetry/widget-operator/internal/chart/helmtemplate"
	"github.com/widgetry/widget-operator/internal/controller"
	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/manager"
	"github.com/widgetry/widget-operator/internal/scheme"
	"github.com/widgetry/widget-operator/internal/testenv"
	"github.com/widgetry/widget-operator/internal/testenv/prereq"
	"github.com/widgetry/widget-operator/internal/testenv/widgetenv"
)

const (
	leaseDuration = 4 * time.Second // widgetenv's manager flags
	retryPeriod   = time.Second
)

// replicas starts n managers with identities replica-0..n-1; replica-0 serves the port the
// apiserver calls.
func replicas(t *testing.T, op *widgetenv.Operator, n int, args ...string) []*widgetenv.Manager {
	t.Helper()
	ms := make([]*widgetenv.Manager, n)
	for i := range ms {
		port := op.WebhookPort
		if i > 0 {
			port = testenv.FreePort(t)
		}
		ms[i] = op.StartManager(t, widgetenv.ManagerOptions{WebhookPort: port,
			Args: append([]string{"--leader-election-identity=replica-" + strconv.Itoa(i)}, args...)})
	}
	return ms
}

// leader returns the Lease's holder, "" when nobody holds a current lease.
func leader(t *testing.T, c client.Client) string {
	t.Helper()
	lease := &coordinationv1.Lease{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: widgetenv.Namespace, Name: manager.LeaderElectionID}, lease); err != nil {
		return ""
	}
	return ptr.Deref(lease.Spec.HolderIdentity, "")
}

// waitLeader polls the Lease until its holder satisfies ok and returns the holder and when it
// was seen.
func waitLeader(t *testing.T, c client.Client, within time.Duration, ok func(string) bool) (string, time.Time) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		if h := leader(t, c); ok(h) {
			return h, time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("no acceptable leader within %s (holder %q)", within, leader(t, c))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// routable tracks which replicas answer /readyz, as an endpoints controller would, and gives
// the load their webhook URLs.
type routable struct {
	mu    sync.Mutex
	ready map[*widgetenv.Manager]bool
	out   map[*widgetenv.Manager]bool // taken out by the test (about to be killed)
}

func track(ctx context.Context, ms []*widgetenv.Manager) *routable {
	r := &routable{ready: map[*widgetenv.Manager]bool{}, out: map[*widgetenv.Manager]bool{}}
	for _, m := range ms {
		r.ready[m] = true
	}
	// The pollers start only once the map is filled: they write it under r.mu.
	for _, m := range ms {
		go func() {
			for ctx.Err() == nil {
				ok := m.Ready()
				r.mu.Lock()
				r.ready[m] = ok
				r.mu.Unlock()
				time.Sleep(100 * time.Millisecond)
			}
		}()
	}
	return r
}

func (r *routable) remove(m *widgetenv.Manager) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.out[m] = true
}

func (r *routable) targets() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var urls []string
	for m, ok := range r.ready {
		if ok && !r.out[m] {
			urls = append(urls, "https://127.0.0.1:"+strconv.Itoa(m.WebhookPort))
		}
	}
	return urls
}

func byIdentity(ms []*widgetenv.Manager, id string) *widgetenv.Manager {
	for i, m := range ms {
		if id == "replica-"+strconv.Itoa(i) {
			return m
		}
	}
	return nil
}

// TestLeaderHandover: three replicas; the leader stops gracefully (its lease is released
// before the webhook drain, so a standby leads within about a retry period), then the new
// leader is killed (a standby leads once the lease expires). Webhook traffic to the replicas
// that are routable sees no failure throughout: webhooks do not depend on leadership.
func TestLeaderHandover(t *testing.T) {
	env := testenv.Start(t, testenv.Options{Scheme: scheme.New()})
	op := widgetenv.Setup(t, env, crd.StageAddVersion)
	ms := replicas(t, op, 3, "--drain-delay=5s", "--connection-drain-timeout=7s")
	first, _ := waitLeader(t, env.Client, 30*time.Second, func(h string) bool { return byIdentity(ms, h) != nil })

	ctx, stopLoad := context.WithCancel(context.Background())
	defer stopLoad()
	route := track(ctx, ms)
	load := &widgetenv.Load{Client: op.WebhookClient(), Targets: route.targets, Rate: 60}
	results := make(chan *widgetenv.LoadResult, 1)
	go func() { results <- load.Run(ctx) }()
	time.Sleep(2 * time.Second)

	// Graceful: SIGTERM the leader.
	stopping := byIdentity(ms, first)
	sent := time.Now()
	if err := stopping.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	second, seen := waitLeader(t, env.Client, 10*time.Second, func(h string) bool { return h != "" && h != first })
	graceful := seen.Sub(sent)
	t.Logf("graceful stop of %s: %s leads after %s (drain delay 5s, retry period %s)", first, second, graceful.Round(time.Millisecond), retryPeriod)
	if graceful > 3*time.Second {
		t.Errorf("handover after a graceful stop took %s, want at most 3s", graceful)
	}
	<-stopping.Exited()

	// Kill: SIGKILL the new leader. Its own in-flight connections die with it, as they would
	// in a cluster, so the load stops sending to it first, as if its endpoint were gone.
	victim := byIdentity(ms, second)
	route.remove(victim)
	time.Sleep(300 * time.Millisecond)
	killed := time.Now()
	if err := victim.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	third, seen := waitLeader(t, env.Client, 15*time.Second, func(h string) bool { return h != "" && h != first && h != second })
	failover := seen.Sub(killed)
	// A standby counts the lease duration from when it last saw the Lease change, which it
	// checks every retry period, jittered by client-go up to 2.2 times: the worst case is the
	// lease duration plus two jittered retry periods.
	bound := leaseDuration + 2*time.Duration(2.2*float64(retryPeriod))
	t.Logf("kill of %s: %s leads after %s (lease %s + retry %s)", second, third, failover.Round(time.Millisecond), leaseDuration, retryPeriod)
	if failover > bound {
		t.Errorf("failover after a kill took %s, want within %s", failover, bound)
	}
	finishLoad(t, stopLoad, results, "during both handovers", 300)
}

// servedSerial returns the serial number of the certificate a replica serves.
func servedSerial(t *testing.T, pool *x509.CertPool, port int) string {
	t.Helper()
	conn, err := tls.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port), &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
	if err != nil {
		return "error: " + err.Error()
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
}

// TestCertificateRotation: the serving certificate files are replaced (as cert-manager does
// in the mounted Secret) while both replicas take load: no request fails and both serve the
// new certificate without a restart.
func TestCertificateRotation(t *testing.T) {
	env := testenv.Start(t, testenv.Options{Scheme: scheme.New()})
	op := widgetenv.Setup(t, env, crd.StageAddVersion)
	ms := replicas(t, op, 2)
	pool := op.CA.CertPool()
	before := servedSerial(t, pool, ms[0].WebhookPort)

	ctx, stopLoad := context.WithCancel(context.Background())
	defer stopLoad()
	load := &widgetenv.Load{Client: op.WebhookClient(), Targets: track(ctx, ms).targets, Rate: 60}
	results := make(chan *widgetenv.LoadResult, 1)
	go func() { results <- load.Run(ctx) }()
	time.Sleep(time.Second)

	op.CA.Issue(t, "127.0.0.1", "localhost").WriteDir(t, op.CertDir)
	rotated := time.Now()
	testenv.Eventually(t, 30*time.Second, "both replicas serve the new certificate", func() error {
		for _, m := range ms {
			if s := servedSerial(t, pool, m.WebhookPort); s == before {
				return fmt.Errorf("replica on %d still serves serial %s", m.WebhookPort, s)
			}
		}
		return nil
	})
	t.Logf("new certificate served %s after the files changed", time.Since(rotated).Round(time.Millisecond))
	time.Sleep(time.Second)
	stopLoad()
	res := <-results
	t.Logf("webhook load during rotation: %s", res)
	if res.Failures > 0 || res.Requests < 60 {
		t.Errorf("load: %s; errors: %v", res, res.Errors)
	}
}

// TestDrain: after SIGTERM readiness fails at once, and requests keep succeeding for the
// drain delay.
func TestDrain(t *testing.T) {
	env := testenv.Start(t, testenv.Options{Scheme: scheme.New()})
	op := widgetenv.Setup(t, env, crd.StageAddVersion)
	m := op.StartManager(t, widgetenv.ManagerOptions{Args: []string{"--drain-delay=4s", "--connection-drain-timeout=6s"}})
	url := "https://127.0.0.1:" + strconv.Itoa(m.WebhookPort)

	ctx, stopLoad := context.WithCancel(context.Background())
	defer stopLoad()
	load := &widgetenv.Load{Client: op.WebhookClient(), Targets: func() []string { return []string{url} }, Rate: 50}
	results := make(chan *widgetenv.LoadResult, 1)
	go func() { results <- load.Run(ctx) }()
	time.Sleep(time.Second)
	if err := m.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	testenv.Eventually(t, time.Second, "readiness fails after SIGTERM", func() error {
		if m.Ready() {
			return fmt.Errorf("still ready")
		}
		return nil
	})
	t.Logf("readiness failed %s after SIGTERM", time.Since(sent).Round(time.Millisecond))
	time.Sleep(3*time.Second - time.Since(sent)) // well inside the drain delay
	stopLoad()
	res := <-results
	t.Logf("load across SIGTERM and 3s of drain: %s", res)
	if res.Failures > 0 {
		t.Errorf("requests failed during the drain: %s; %v", res, res.Errors)
	}
	select {
	case <-m.Exited():
		t.Errorf("the manager exited %s after SIGTERM, before its drain delay", time.Since(sent))
	default:
	}
	<-m.Exited()
}

// TestSecureEndpoints: no HTTP/2, no TLS below 1.2, and /metrics only for an authenticated and
// authorized client.
func TestSecureEndpoints(t *testing.T) {
	env := testenv.Start(t, testenv.Options{Scheme: scheme.New()})
	op := widgetenv.Setup(t, env, crd.StageAddVersion)
	m := op.StartManager(t, widgetenv.ManagerOptions{})
	pool := op.CA.CertPool()
	// The metrics server makes its self-signed certificate after readiness; wait for it.
	testenv.Eventually(t, 20*time.Second, "the metrics port accepts connections", func() error {
		conn, err := tls.Dial("tcp", "127.0.0.1:"+strconv.Itoa(m.MetricsPort), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // reachability only
		if err == nil {
			conn.Close()
		}
		return err
	})

	for _, port := range []int{m.WebhookPort, m.MetricsPort} {
		addr := "127.0.0.1:" + strconv.Itoa(port)
		if conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}}); err == nil { //nolint:gosec // protocol check only
			if p := conn.ConnectionState().NegotiatedProtocol; p == "h2" {
				t.Errorf("%s negotiated HTTP/2", addr)
			}
			conn.Close()
		}
		if conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, MaxVersion: tls.VersionTLS11}); err == nil { //nolint:gosec // protocol check only
			conn.Close()
			t.Errorf("%s accepted TLS 1.1", addr)
		}
	}
	if conn, err := tls.Dial("tcp", "127.0.0.1:"+strconv.Itoa(m.WebhookPort), &tls.Config{RootCAs: pool, NextProtos: []string{"h2", "http/1.1"}}); err != nil {
		t.Errorf("an HTTP/1.1 client was refused: %v", err)
	} else {
		if p := conn.ConnectionState().NegotiatedProtocol; p != "http/1.1" {
			t.Errorf("negotiated %q, want http/1.1", p)
		}
		conn.Close()
	}

	var body string
	get := func(token string) int {
		code, b := m.ScrapeMetrics(token)
		body = b
		return code
	}
	if code := get(""); code != http.StatusUnauthorized && code != http.StatusForbidden {
		t.Errorf("unauthenticated /metrics: %d, want 401 or 403", code)
	}
	if code := get(widgetenv.ServiceAccountToken(t, env, "nobody", false)); code != http.StatusForbidden {
		t.Errorf("an authenticated but unauthorized scraper got %d, want 403", code)
	}
	scraper := widgetenv.ServiceAccountToken(t, env, "prometheus", true)
	testenv.Eventually(t, 20*time.Second, "the authorized scraper reads /metrics", func() error {
		if code := get(scraper); code != http.StatusOK {
			return fmt.Errorf("got %d", code)
		}
		return nil
	})
	// Invented tokens from one address: the first few cost a TokenReview and get an error, the
	// rest a 429 without one; the scraper's token, seen good before, still passes.
	codes := map[int]int{}
	for i := range 30 {
		codes[get(fmt.Sprintf("forged-%d", i))]++
	}
	if limited := codes[http.StatusTooManyRequests]; limited < 30-manager.MetricsAuthFailureBurst-2 {
		t.Errorf("30 invented tokens were answered %v; want at most %d reviewed (each a TokenReview), the rest 429", codes, manager.MetricsAuthFailureBurst)
	}
	if code := get(scraper); code != http.StatusOK {
		t.Errorf("the scraper, from the address that sent the invented tokens: %d", code)
	}
	for _, metric := range []string{
		`widget_listener_open_connections{listener="webhook"}`, `widget_listener_auth_failures_limited_total{listener="metrics"}`,
		`widget_build_info{`, `widget_crd_version_info{crd="widgets.widgetry.io",served="true",storage="true",version="v1alpha1"} 1`,
		`widget_crd_stored_versions{crd="widgets.widgetry.io",version="v1alpha1"} 1`, `widget_webhook_certificate_expiry_timestamp_seconds`,
		`controller_runtime_reconcile_total{controller="widget"`, `leader_election_master_status{name="widget-operator.widgetry.io"} 1`,
	} {
		if !strings.Contains(body, metric) {
			t.Errorf("/metrics lacks %s", metric)
		}
	}
}

// TestWebhooksWithoutTheController: with the Widget CRD deleted the controller cannot be set
// up, yet the manager starts, is Ready and serves conversion and admission without a failure
// (the pod would otherwise crash-loop, taking the webhooks of every replica down); once the
// CRD is back the controller starts at its next attempt and reconciles, in the same process.
func TestWebhooksWithoutTheController(t *testing.T) {
	env := testenv.Start(t, testenv.Options{Scheme: scheme.New()})
	op := widgetenv.Setup(t, env, crd.StageInitial)
	ctx := t.Context()
	if out, err := env.Kubectl(t, "delete", "crd", crd.WidgetName, "--wait=true"); err != nil {
		t.Fatal(err, out)
	}
	m := op.StartManager(t, widgetenv.ManagerOptions{})

	webhooksServeAndReady(t, op, m, "without its controller")

	env.InstallCRDs(t, op.CRD(t, crd.StageInitial))
	if out, err := env.Kubectl(t, "create", "namespace", "back"); err != nil {
		t.Fatal(err, out)
	}
	w := &v1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "back", Name: "w"}, Spec: v1alpha1.WidgetSpec{Image: "srv:1"}}
	if err := env.Client.Create(ctx, w); err != nil {
		t.Fatal(err)
	}
	controllerFinalizes(t, env, m, w, 2*time.Minute)
}

// TestWebhooksWithoutWidgetRBAC: a manager running both planes in one process (as this tier
// does) as the chart's controller ServiceAccount, holding the chart's RBAC of both planes but
// with the Widget rules taken out of the controller's ClusterRole, serves conversion and
// admission and is Ready; its controller fails (its Widget informer cannot list) and is set
// up again with backoff, logging why; once the rules are back it reconciles.
func TestWebhooksWithoutWidgetRBAC(t *testing.T) {
	env := testenv.Start(t, testenv.Options{Scheme: scheme.New()})
	op := widgetenv.Setup(t, env, crd.StageInitial)
	ctx := t.Context()

	// The chart's RBAC for the manager, as helm renders it.
	manifests, err := helmtemplate.Render(helmtemplate.Options{Helm: prereq.Tool(t, "helm3"), Chart: filepath.Join(prereq.RepoRoot(t), "charts", "widget-operator"),
		Namespace: widgetenv.Namespace, ShowOnly: []string{"templates/clusterrole.yaml", "templates/clusterrolebinding.yaml", "templates/role.yaml", "templates/rolebinding.yaml"}})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := helmtemplate.Parse(manifests)
	if err != nil {
		t.Fatal(err)
	}
	var managerRole *rbacv1.ClusterRole
	for _, o := range objs {
		if _, hook := o.GetAnnotations()["helm.sh/hook"]; hook {
			continue // the hooks' RBAC
		}
		if o.GetKind() == "ClusterRole" && o.GetName() == "widget-operator-controller" {
			managerRole = &rbacv1.ClusterRole{}
			if err := helmtemplate.Into(o, managerRole); err != nil {
				t.Fatal(err)
			}
			continue
		}
		o.SetResourceVersion("")
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatalf("create %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	if managerRole == nil {
		t.Fatal("the chart renders no ClusterRole for the controller plane")
	}
	// One process runs both planes here: it holds the webhook plane's role too.
	both := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "both-planes"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "widget-operator-webhook"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: widgetenv.Namespace, Name: "widget-operator-controller"}}}
	if err := env.Client.Create(ctx, both); err != nil {
		t.Fatal(err)
	}
	withWidgets := managerRole.DeepCopy()
	managerRole.Rules = slices.DeleteFunc(managerRole.Rules, func(r rbacv1.PolicyRule) bool { return slices.Contains(r.APIGroups, "widgetry.io") })
	if len(managerRole.Rules) == len(withWidgets.Rules) {
		t.Fatal("the manager's ClusterRole has no widgetry.io rule to take out")
	}
	if err := env.Client.Create(ctx, managerRole); err != nil {
		t.Fatal(err)
	}

	// The manager runs as the chart's ServiceAccount: a client certificate with its user name.
	user, err := env.Environment.ControlPlane.AddUser(envtest.User{Name: "system:serviceaccount:" + widgetenv.Namespace + ":widget-operator-controller",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + widgetenv.Namespace, "system:authenticated"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	kubeconfigPath := filepath.Join(t.TempDir(), "manager.kubeconfig")
	if err := os.WriteFile(kubeconfigPath, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	m := op.StartManager(t, widgetenv.ManagerOptions{Kubeconfig: kubeconfigPath})

	webhooksServeAndReady(t, op, m, "without RBAC for Widgets")
	w := &v1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: widgetenv.Namespace, Name: "rbac"}, Spec: v1alpha1.WidgetSpec{Image: "srv:1"}}
	if err := env.Client.Create(ctx, w); err != nil {
		t.Fatalf("a Widget written through the webhooks of a manager without RBAC for Widgets: %v", err)
	}
	testenv.Eventually(t, 2*time.Minute, "the manager logs why its controller cannot run", func() error {
		b, err := os.ReadFile(m.LogFile)
		if err != nil {
			return err
		}
		if !strings.Contains(string(b), "the Widget controller failed") || !strings.Contains(string(b), "may not list widgets.widgetry.io cluster-wide") {
			return fmt.Errorf("no such line yet")
		}
		return nil
	})

	// The rules back: the controller, set up again, reconciles.
	current := &rbacv1.ClusterRole{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(managerRole), current); err != nil {
		t.Fatal(err)
	}
	current.Rules = withWidgets.Rules
	if err := env.Client.Update(ctx, current); err != nil {
		t.Fatal(err)
	}
	controllerFinalizes(t, env, m, w, 3*time.Minute)
}

// webhooksServeAndReady sends webhook requests to m for 3 s, none of which may fail, and
// checks that m is Ready: what a manager whose controller cannot run must still do.
func webhooksServeAndReady(t *testing.T, op *widgetenv.Operator, m *widgetenv.Manager, without string) {
	t.Helper()
	ctx, stop := context.WithTimeout(t.Context(), 3*time.Second)
	defer stop()
	load := &widgetenv.Load{Client: op.WebhookClient(), Rate: 20,
		Targets: func() []string { return []string{"https://127.0.0.1:" + strconv.Itoa(m.WebhookPort)} }}
	if res := load.Run(ctx); res.Requests < 20 || res.Failures > 0 {
		t.Fatalf("webhooks %s: %s %v", without, res, res.Errors)
	}
	if !m.Ready() {
		t.Fatalf("the manager is not Ready %s", without)
	}
}

// controllerFinalizes waits until the controller, set up again after failing, puts its
// finalizer on w, and checks that the manager never exited meanwhile.
func controllerFinalizes(t *testing.T, env *testenv.Env, m *widgetenv.Manager, w *v1alpha1.Widget, timeout time.Duration) {
	t.Helper()
	testenv.Eventually(t, timeout, "the controller, set up again, finalizes the Widget", func() error {
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(w), w); err != nil {
			return err
		}
		if !slices.Contains(w.Finalizers, controller.Finalizer) {
			return fmt.Errorf("finalizers %v", w.Finalizers)
		}
		return nil
	})
	select {
	case <-m.Exited():
		t.Fatalf("the manager exited: %v", m.ExitErr())
	default:
	}
}

// finishLoad lets the load run 2 s more, stops it and fails the test unless it sent atLeast
// requests, none of them failed.
func finishLoad(t *testing.T, stop func(), results <-chan *widgetenv.LoadResult, during string, atLeast int) {
	t.Helper()
	time.Sleep(2 * time.Second)
	stop()
	res := <-results
	t.Logf("webhook load %s: %s", during, res)
	if res.Failures > 0 || res.Requests < atLeast {
		t.Errorf("load: %s; errors: %v", res, res.Errors)
	}
}

// TestKilledControllerLeavesWebhooksServing runs the two planes as the chart does, each its
// own processes: two --components=webhooks and two --components=controller, every one with its
// own metrics endpoint. The leading controller process is killed (SIGKILL: its lease is not
// released) while webhook traffic goes to both webhook processes, none of them taken out of the
// rotation: not one request fails, a standby controller leads once the lease expires, and the
// controller plane's /metrics labels its series process="controller" (what the alerts and
// dashboards select) while the webhook plane's carry no controller series.
func TestKilledControllerLeavesWebhooksServing(t *testing.T) {
	env := testenv.Start(t, testenv.Options{Scheme: scheme.New()})
	op := widgetenv.Setup(t, env, crd.StageAddVersion)
	scraper := widgetenv.ServiceAccountToken(t, env, "prometheus", true)
	var webhooks, controllers []*widgetenv.Manager
	for i := range 2 {
		port := op.WebhookPort
		if i > 0 {
			port = testenv.FreePort(t)
		}
		webhooks = append(webhooks, op.StartManager(t, widgetenv.ManagerOptions{WebhookPort: port,
			Args: []string{"--components=webhooks"}}))
		controllers = append(controllers, op.StartManager(t, widgetenv.ManagerOptions{WebhookPort: testenv.FreePort(t),
			Args: []string{"--components=controller", "--leader-election-identity=replica-" + strconv.Itoa(i),
				"--drain-delay=0s", "--connection-drain-timeout=0s"}}))
	}
	first, _ := waitLeader(t, env.Client, 30*time.Second, func(h string) bool { return byIdentity(controllers, h) != nil })
	leading := slices.Index(controllers, byIdentity(controllers, first))
	waitMetrics(t, controllers[leading], scraper, `leader_election_master_status{name="widget-operator.widgetry.io",process="controller"} 1`,
		`widget_controller_running{process="controller"} 1`)
	waitMetrics(t, controllers[1-leading], scraper, `leader_election_master_status{name="widget-operator.widgetry.io",process="controller"} 0`)
	// The controller plane's endpoint authenticates its scrapers as the webhook plane's does.
	if code, _ := controllers[leading].ScrapeMetrics(""); code != http.StatusUnauthorized {
		t.Errorf("the controller plane's /metrics without a token: HTTP %d, want 401", code)
	}
	if _, body := webhooks[0].ScrapeMetrics(scraper); strings.Contains(body, `process="controller"`) || strings.Contains(body, "widget_controller_running") {
		t.Errorf("the webhook plane's /metrics carries controller series")
	}

	ctx, stopLoad := context.WithCancel(context.Background())
	defer stopLoad()
	load := &widgetenv.Load{Client: op.WebhookClient(), Targets: track(ctx, webhooks).targets, Rate: 60}
	results := make(chan *widgetenv.LoadResult, 1)
	go func() { results <- load.Run(ctx) }()
	time.Sleep(2 * time.Second)

	killed := time.Now()
	if err := controllers[leading].Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	second, seen := waitLeader(t, env.Client, 15*time.Second, func(h string) bool { return h != "" && h != first })
	t.Logf("controller %s killed: %s leads after %s (lease %s)", first, second, seen.Sub(killed).Round(time.Millisecond), leaseDuration)
	// The standby now leads, and says so on its own endpoint.
	waitMetrics(t, controllers[1-leading], scraper, `leader_election_master_status{name="widget-operator.widgetry.io",process="controller"} 1`)
	finishLoad(t, stopLoad, results, "while the leading controller was killed", 200)
	for _, w := range webhooks {
		if !w.Ready() {
			t.Errorf("webhook process on port %d not ready after the controller's kill", w.WebhookPort)
		}
	}
}
