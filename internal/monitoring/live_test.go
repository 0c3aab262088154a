//go:build envtest

package monitoring

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	v1 "github.com/widgetry/widget-operator/api/v1"
	"github.com/widgetry/widget-operator/api/v1alpha1"
	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/migrate"
	"github.com/widgetry/widget-operator/internal/runbooks"
	"github.com/widgetry/widget-operator/internal/scheme"
	"github.com/widgetry/widget-operator/internal/testenv"
	"github.com/widgetry/widget-operator/internal/testenv/prereq"
	"github.com/widgetry/widget-operator/internal/testenv/widgetenv"
)

// promQuery evaluates expr at the current time and returns the number of series.
func promQuery(base, expr string) (int, error) {
	resp, err := http.Get(base + "/api/v1/query?" + url.Values{"query": {expr}}.Encode())
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var r struct {
		Status, Error string
		Data          struct{ Result []json.RawMessage }
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return 0, err
	}
	if r.Status != "success" {
		return 0, fmt.Errorf("%s", r.Error)
	}
	return len(r.Data.Result), nil
}

// targets summarises Prometheus' scrape targets and their last errors.
func targets(base string) string {
	resp, err := http.Get(base + "/api/v1/targets")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	var r struct {
		Data struct {
			ActiveTargets []struct {
				ScrapeURL, Health, LastError string
			}
		}
	}
	_ = json.NewDecoder(resp.Body).Decode(&r)
	return fmt.Sprintf("%+v", r.Data.ActiveTargets)
}

// startPrometheus runs Debian's Prometheus with config until the test ends.
func startPrometheus(t *testing.T, config string) string {
	t.Helper()
	prometheus := prereq.Command(t, "prometheus", "envtest")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfg, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, prometheus, "--config.file="+cfg, "--storage.tsdb.path="+filepath.Join(dir, "tsdb"),
		"--web.listen-address="+addr, "--log.level=warn")
	var logs strings.Builder
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("prometheus log:\n%s", logs.String())
		}
	})
	base := "http://" + addr
	waitReady(t, base+"/-/ready", &logs)
	return base
}

// TestLiveManagerScrapedByPrometheus: Debian's Prometheus scrapes a real widget-manager
// (authenticated as the metrics filter requires) and the apiserver; after a workload every
// dashboard query and alert expression evaluates, the key panels return data, and the
// runbooks' diagnosis commands that need only the apiserver run and succeed.
func TestLiveManagerScrapedByPrometheus(t *testing.T) {
	env := testenv.Start(t, testenv.Options{Scheme: scheme.New()})
	op := widgetenv.Setup(t, env, crd.StageAddVersion)
	m := op.StartManager(t, widgetenv.ManagerOptions{})
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte(widgetenv.ServiceAccountToken(t, env, "prometheus", true)), 0o600); err != nil {
		t.Fatal(err)
	}
	// The apiserver's /metrics, as an admin client certificate.
	user, err := env.Environment.ControlPlane.AddUser(envtest.User{Name: "prometheus", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	uc := user.Config()
	certFile, keyFile := filepath.Join(dir, "apiserver.crt"), filepath.Join(dir, "apiserver.key")
	if err := os.WriteFile(certFile, uc.CertData, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, uc.KeyData, 0o600); err != nil {
		t.Fatal(err)
	}
	apiserver, err := url.Parse(env.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	base := startPrometheus(t, fmt.Sprintf(`global: {scrape_interval: 1s, evaluation_interval: 1s}
scrape_configs:
- job_name: %s
  scheme: https
  authorization: {credentials_file: %s}
  tls_config: {insecure_skip_verify: true}
  static_configs: [{targets: ["127.0.0.1:%d"], labels: {namespace: %s, pod: widget-operator-0}}]
- job_name: apiserver
  scheme: https
  tls_config: {insecure_skip_verify: true, cert_file: %s, key_file: %s}
  static_configs: [{targets: [%q]}]
`, DefaultJob, token, m.MetricsPort, widgetenv.Namespace, certFile, keyFile, apiserver.Host))

	// Scraped before the workload starts, so rates see it.
	testenv.Eventually(t, 60*time.Second, "Prometheus scrapes the manager and the apiserver", func() error {
		if n, err := promQuery(base, `up == 1`); err != nil || n != 2 {
			return fmt.Errorf("%d targets up (%w): %s", n, err, targets(base))
		}
		return nil
	})

	// Workload: Widgets created through v1alpha1, read and updated through v1 (conversion),
	// deleted; then the storage flip and a migration.
	ctx := context.Background()
	for i := range 30 {
		w := &v1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: widgetenv.Namespace, Name: fmt.Sprintf("live-%02d", i)},
			Spec: v1alpha1.WidgetSpec{Image: "srv:1", Replicas: ptr.To[int32](1)}}
		if err := env.Client.Create(ctx, w); err != nil {
			t.Fatal(err)
		}
	}
	list := &v1.WidgetList{}
	if err := env.Client.List(ctx, list); err != nil {
		t.Fatal(err)
	}
	for i := range list.Items[:10] {
		testenv.Eventually(t, 30*time.Second, "pause "+list.Items[i].Name, func() error { // the controller writes too
			w := &v1.Widget{}
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(&list.Items[i]), w); err != nil {
				return err
			}
			w.Spec.Paused = ptr.To(true)
			return env.Client.Update(ctx, w)
		})
	}
	if err := env.Client.Delete(ctx, &list.Items[29]); err != nil {
		t.Fatal(err)
	}
	op.SetStage(t, crd.StageFlipStorage)
	widgetenv.WaitForStorageVersion(t, env, "v1", widgetenv.Namespace)
	mig, err := migrate.New(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mig.Migrate(ctx, migrate.Options{CRD: crd.WidgetName, Backend: migrate.BackendClient, ProgressNamespace: widgetenv.Namespace}); err != nil {
		t.Fatal(err)
	}

	// The key panels return data once Prometheus has scraped the workload.
	for _, key := range []string{
		`sum(rate(widget_conversion_requests_total{job="` + DefaultJob + `"}[1m])) > 0`,
		`sum(rate(controller_runtime_reconcile_total{job="` + DefaultJob + `",controller="widget"}[1m])) > 0`,
		`widget_migration_objects_total{job="` + DefaultJob + `",result="migrated"} > 0`,
		`widget_webhook_certificate_expiry_timestamp_seconds{job="` + DefaultJob + `"} > time()`,
		`leader_election_master_status{job="` + DefaultJob + `"} == 1`,
		`widget_crd_stored_versions{job="` + DefaultJob + `",version="v1"}`,
		`sum(rate(apiserver_request_total{job="apiserver",group="widgetry.io"}[1m])) > 0`,
	} {
		testenv.Eventually(t, 60*time.Second, "data for "+key, func() error {
			n, err := promQuery(base, key)
			if err == nil && n == 0 {
				err = fmt.Errorf("no data; scrape targets: %s", targets(base))
			}
			return err
		})
	}
	grafana := strings.NewReplacer(`cluster=~"$cluster"`, `cluster=~".*"`, `job="$job"`, `job="`+DefaultJob+`"`, `namespace=~"$namespace"`, `namespace=~".*"`, "$__rate_interval", "1m")
	for where, exprs := range dashboardExprs(t) {
		for _, e := range exprs {
			if _, err := promQuery(base, grafana.Replace(e)); err != nil {
				t.Errorf("%s: %v\n%s", where, err, e)
			}
		}
	}
	f, err := Rules(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if _, err := promQuery(base, r.Expr); err != nil {
				t.Errorf("alert %s: %v\n%s", r.Alert, err, r.Expr)
			}
		}
	}

	runRunbookCommands(t, env, op)
}

// apiserverOnly matches the runbook commands that need nothing but the apiserver (and the
// conversion webhook it calls): reads of the CRD and of Widgets, and widgetctl's read-only
// commands.
var apiserverOnly = regexp.MustCompile(`^(kubectl get crd widgets\.widgetry\.io|kubectl get widgets\.v1(alpha1)?\.widgetry\.io -A|widgetctl (upgrade status|upgrade plan|verify))`)

// runRunbookCommands runs every such command of the runbooks, as written, with bin/ and
// widgetctl on PATH and KUBECONFIG set.
func runRunbookCommands(t *testing.T, env *testenv.Env, op *widgetenv.Operator) {
	t.Helper()
	widgetctl := widgetenv.Binary(t, "widgetctl")
	path := filepath.Dir(widgetctl) + ":" + env.AssetsDir + ":" + os.Getenv("PATH")
	lines, err := runbooks.Lines(filepath.Join(prereq.RepoRoot(t), "runbooks"))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, l := range lines {
		cmd := l.Command
		if !apiserverOnly.MatchString(cmd) || strings.ContainsAny(cmd, "<$") || seen[cmd] {
			continue
		}
		seen[cmd] = true
		c := exec.Command("bash", "-o", "pipefail", "-c", cmd)
		c.Env = append(os.Environ(), "PATH="+path, "KUBECONFIG="+env.Kubeconfig)
		c.Dir = t.TempDir() // some commands save files (a CRD backup before break-glass)
		out, err := c.CombinedOutput()
		if err != nil && !strings.Contains(cmd, "| head") { // head closing the pipe early is fine
			t.Errorf("%s: %s: %v\n%s", l.File, cmd, err, out)
		}
	}
	if len(seen) < 5 {
		t.Errorf("only %d apiserver-only runbook commands found; the pattern no longer matches the runbooks", len(seen))
	}
	t.Logf("ran %d runbook commands against the apiserver", len(seen))
	_ = op
}
