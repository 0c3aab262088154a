//go:build envtest

package monitoring

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/widgetry/widget-operator/internal/testenv/prereq"
)

// synthetic is one series of the synthetic data set: labels and its value at seconds since the
// start (counters grow, gauges stay).
type synthetic struct {
	name   string
	labels map[string]string
	value  func(s float64) float64
}

func constant(v float64) func(float64) float64  { return func(float64) float64 { return v } }
func perSecond(r float64) func(float64) float64 { return func(s float64) float64 { return r * s } }
func withLabels(base map[string]string, kv ...string) map[string]string {
	l := map[string]string{}
	for k, v := range base {
		l[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		l[kv[i]] = kv[i+1]
	}
	return l
}

// histogram adds the _bucket, _count and _sum series of a histogram observed at rate per second,
// with each bucket holding the given cumulative share.
func histogram(name string, labels map[string]string, rate float64, les []string, shares []float64) []synthetic {
	var out []synthetic
	for i, le := range les {
		out = append(out, synthetic{name + "_bucket", withLabels(labels, "le", le), perSecond(rate * shares[i])})
	}
	return append(out,
		synthetic{name + "_count", labels, perSecond(rate)},
		synthetic{name + "_sum", labels, perSecond(rate * 0.01)})
}

// syntheticData is what the manager's two replicas and the apiserver export during a flip-storage
// migration, with the label sets the code and the upstream libraries use. Failure series that
// only appear after a failure are left out, so ratio panels must cope with a missing numerator.
func syntheticData(now time.Time) []synthetic {
	les := []string{"0.001", "0.01", "0.1", "1", "+Inf"}
	shares := []float64{0.5, 0.9, 0.99, 1, 1}
	var data []synthetic
	for i, inst := range []string{"10.0.0.1:8443", "10.0.0.2:8443"} {
		m := map[string]string{"job": DefaultJob, "namespace": "widget-system", "instance": inst, "pod": fmt.Sprintf("widget-operator-%d", i)}
		leader := float64(1 - i)
		data = append(data,
			synthetic{"up", m, constant(1)},
			synthetic{"widget_build_info", withLabels(m, "version", "v0.1.0", "go_version", "go1.26.8"), constant(1)},
			synthetic{"widget_replica_placement_info", withLabels(m, "node", fmt.Sprintf("node-%d", i), "zone", "zone-a"), constant(1)},
			synthetic{"leader_election_master_status", withLabels(m, "name", LeaseName), constant(leader)},
			synthetic{"controller_runtime_reconcile_total", withLabels(m, "controller", "widget", "result", "success"), perSecond(leader * 5)},
			synthetic{"controller_runtime_reconcile_total", withLabels(m, "controller", "widget", "result", "error"), perSecond(leader * 0.1)},
			synthetic{"controller_runtime_reconcile_errors_total", withLabels(m, "controller", "widget"), perSecond(leader * 0.1)},
			synthetic{"workqueue_depth", withLabels(m, "name", "widget", "controller", "widget"), constant(leader * 3)},
			synthetic{"widget_conversion_requests_total", withLabels(m, "from_version", "v1alpha1", "to_version", "v1", "result", "success"), perSecond(2)},
			synthetic{"widget_conversion_objects_total", withLabels(m, "from_version", "v1alpha1", "to_version", "v1"), perSecond(20)},
			synthetic{"widget_conversion_failures_total", withLabels(m, "reason", "ConversionFailed"), perSecond(0.01)},
			synthetic{"widget_crd_version_info", withLabels(m, "crd", WidgetCRD, "version", "v1alpha1", "served", "true", "storage", "false"), constant(1)},
			synthetic{"widget_crd_version_info", withLabels(m, "crd", WidgetCRD, "version", "v1", "served", "true", "storage", "true"), constant(1)},
			synthetic{"widget_crd_stored_versions", withLabels(m, "crd", WidgetCRD, "version", "v1alpha1"), constant(1)},
			synthetic{"widget_crd_stored_versions", withLabels(m, "crd", WidgetCRD, "version", "v1"), constant(1)},
			synthetic{"widget_webhook_certificate_expiry_timestamp_seconds", m, constant(float64(now.Add(60 * 24 * time.Hour).Unix()))},
			synthetic{"widget_webhook_certificate_not_before_timestamp_seconds", m, constant(float64(now.Add(-30 * 24 * time.Hour).Unix()))},
			synthetic{"widget_webhook_certificate_renewal_held", m, constant(0)},
			// Panic counters exist from the start at 0 (controller-runtime initialises them).
			synthetic{"controller_runtime_reconcile_panics_total", withLabels(m, "controller", "widget", "process", "controller"), constant(0)},
			synthetic{"controller_runtime_webhook_panics_total", m, constant(0)},
			synthetic{"widget_conversion_panics_total", m, constant(0)},
			synthetic{"workqueue_longest_running_processor_seconds", withLabels(m, "name", "widget", "controller", "widget", "process", "controller"), constant(leader * 0.2)},
			synthetic{"workqueue_unfinished_work_seconds", withLabels(m, "name", "widget", "controller", "widget", "process", "controller"), constant(leader * 0.3)},
			// Both processes: the webhooks' (no process label) and the controller's.
			synthetic{"rest_client_requests_total", withLabels(m, "code", "200", "method", "GET", "host", "10.96.0.1:443"), perSecond(3)},
			synthetic{"rest_client_requests_total", withLabels(m, "code", "200", "method", "GET", "host", "10.96.0.1:443", "process", "controller"), perSecond(leader * 10)},
			synthetic{"process_start_time_seconds", m, constant(float64(now.Add(-2 * time.Hour).Unix()))},
			synthetic{"process_start_time_seconds", withLabels(m, "process", "controller"), constant(float64(now.Add(-2 * time.Hour).Unix()))},
			synthetic{"widget_migration_objects_total", withLabels(m, "crd", WidgetCRD, "result", "migrated"), perSecond(50)},
			synthetic{"widget_migration_objects_total", withLabels(m, "crd", WidgetCRD, "result", "conflict"), perSecond(1)},
			synthetic{"widget_migration_in_progress", withLabels(m, "crd", WidgetCRD), constant(1)},
			synthetic{"widget_migration_failed", withLabels(m, "crd", WidgetCRD), constant(0)},
			synthetic{"widget_migration_last_progress_timestamp_seconds", withLabels(m, "crd", WidgetCRD), func(s float64) float64 { return float64(now.Unix()) - 1800 + s }},
		)
		data = append(data, histogram("controller_runtime_reconcile_time_seconds", withLabels(m, "controller", "widget"), leader*5, les, shares)...)
		data = append(data, histogram("workqueue_queue_duration_seconds", withLabels(m, "name", "widget", "controller", "widget"), leader*5, les, shares)...)
		data = append(data, histogram("widget_conversion_duration_seconds", withLabels(m, "from_version", "v1alpha1", "to_version", "v1"), 2, les, shares)...)
		data = append(data, histogram("widget_conversion_review_objects", m, 2, les, shares)...)
		for _, path := range []string{"/convert", "/mutate-widgetry-io-widget", "/validate-widgetry-io-widget"} {
			data = append(data, synthetic{"controller_runtime_webhook_requests_total", withLabels(m, "webhook", path, "code", "200"), perSecond(1)})
			data = append(data, histogram("controller_runtime_webhook_latency_seconds", withLabels(m, "webhook", path), 1, les, shares)...)
		}
		// The kubelet's cAdvisor, for both containers of the pod (its own job; namespace and pod
		// are the container's).
		for _, container := range []string{"manager", "controller"} {
			c := map[string]string{"job": "kubelet", "metrics_path": "/metrics/cadvisor", "instance": "10.0.0.10:10250",
				"namespace": "widget-system", "pod": m["pod"], "container": container}
			data = append(data,
				synthetic{"container_cpu_usage_seconds_total", c, perSecond(0.05)},
				synthetic{"container_cpu_cfs_periods_total", c, perSecond(10)},
				synthetic{"container_cpu_cfs_throttled_periods_total", c, perSecond(0.5)},
				synthetic{"container_memory_working_set_bytes", c, constant(64 << 20)},
				synthetic{"container_spec_memory_limit_bytes", c, constant(256 << 20)},
				synthetic{"container_spec_cpu_quota", c, constant(50000)},
				synthetic{"container_spec_cpu_period", c, constant(100000)},
			)
		}
	}
	// cert-manager's controller, scraped from its own pod: the Certificate's namespace arrives as
	// exported_namespace.
	cm := map[string]string{"job": "cert-manager", "namespace": "cert-manager", "instance": "10.0.0.20:9402", "exported_namespace": "widget-system",
		"name": DefaultCertificate, "issuer_name": "widget-operator-ca", "issuer_kind": "Issuer", "issuer_group": "cert-manager.io"}
	data = append(data,
		synthetic{"certmanager_certificate_ready_status", withLabels(cm, "condition", "True"), constant(1)},
		synthetic{"certmanager_certificate_ready_status", withLabels(cm, "condition", "False"), constant(0)},
		synthetic{"certmanager_certificate_ready_status", withLabels(cm, "condition", "Unknown"), constant(0)},
		synthetic{"certmanager_certificate_expiration_timestamp_seconds", cm, constant(float64(now.Add(60 * 24 * time.Hour).Unix()))},
		synthetic{"certmanager_certificate_renewal_timestamp_seconds", cm, constant(float64(now.Add(30 * 24 * time.Hour).Unix()))},
	)
	a := map[string]string{"job": "apiserver", "instance": "10.0.0.9:6443"}
	data = append(data,
		synthetic{"up", a, constant(1)},
		synthetic{"apiserver_request_total", withLabels(a, "group", "widgetry.io", "version", "v1alpha1", "resource", "widgets", "verb", "LIST", "code", "200"), perSecond(0.5)},
		synthetic{"apiserver_request_total", withLabels(a, "group", "widgetry.io", "version", "v1", "resource", "widgets", "verb", "GET", "code", "200"), perSecond(3)},
		synthetic{"apiserver_requested_deprecated_apis", withLabels(a, "group", "widgetry.io", "version", "v1alpha1", "resource", "widgets", "removed_release", ""), constant(1)},
		// A dry run (the chart's hooks): left out by the panels and the alert.
		synthetic{"apiserver_request_total", withLabels(a, "group", "widgetry.io", "version", "v1alpha1", "resource", "widgets", "verb", "CREATE", "dry_run", "All", "code", "201"), perSecond(0.1)},
	)
	// The admission webhooks as the apiserver calls them: allowed, denied by validation, and
	// no errors at all (the rejection series of calling errors do not exist).
	for _, w := range []struct{ name, typ, op string }{{MutatingWebhookName, "admit", "UPDATE"}, {ValidatingWebhookName, "validating", "CREATE"}} {
		l := withLabels(a, "name", w.name, "type", w.typ, "operation", w.op)
		data = append(data,
			synthetic{"apiserver_admission_webhook_request_total", withLabels(l, "code", "200", "rejected", "false"), perSecond(2)},
			synthetic{"apiserver_admission_webhook_request_total", withLabels(l, "code", "403", "rejected", "true"), perSecond(0.1)},
			synthetic{"apiserver_admission_webhook_rejection_count", withLabels(l, "error_type", "no_error", "rejection_code", "403"), perSecond(0.1)},
		)
		data = append(data, histogram("apiserver_admission_webhook_admission_duration_seconds", withLabels(l, "rejected", "false"), 2, les, shares)...)
	}
	// A healthy cluster: no failed conversion has happened since the apiserver started, so the
	// failure series do not exist at all and the error ratios must still show 0.
	data = append(data, histogram("apiserver_crd_conversion_webhook_duration_seconds",
		withLabels(a, "crd_name", WidgetCRD, "from_version", "widgetry.io/v1", "to_version", "widgetry.io/v1alpha1", "succeeded", "true"), 4, les, shares)...)
	return data
}

// writeOpenMetrics writes the data as OpenMetrics with a sample every step from start to end.
func writeOpenMetrics(path string, data []synthetic, start, end time.Time, step time.Duration) error {
	byName := map[string][]synthetic{}
	var names []string
	for _, d := range data {
		if _, ok := byName[d.name]; !ok {
			names = append(names, d.name)
		}
		byName[d.name] = append(byName[d.name], d)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, name := range names {
		fmt.Fprintf(&b, "# TYPE %s unknown\n", name)
		for _, d := range byName[name] {
			keys := make([]string, 0, len(d.labels))
			for k := range d.labels {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			var ls []string
			for _, k := range keys {
				ls = append(ls, fmt.Sprintf("%s=%q", k, d.labels[k]))
			}
			for t := start; !t.After(end); t = t.Add(step) {
				fmt.Fprintf(&b, "%s{%s} %g %d\n", name, strings.Join(ls, ","), d.value(t.Sub(start).Seconds()), t.Unix())
			}
		}
	}
	b.WriteString("# EOF\n")
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// TestQueriesAgainstPrometheus loads synthetic data shaped like the manager's, controller-runtime's
// and the apiserver's metrics into Debian's Prometheus and evaluates every dashboard query (each
// must return data) and every alert expression (each must evaluate without error).
func TestQueriesAgainstPrometheus(t *testing.T) {
	promtool := prereq.Command(t, "promtool", "envtest")
	prometheus := prereq.Command(t, "prometheus", "envtest")
	dir := t.TempDir()
	end := time.Now().Truncate(time.Minute)
	start := end.Add(-30 * time.Minute)
	om := filepath.Join(dir, "data.om")
	if err := writeOpenMetrics(om, syntheticData(end), start, end, 15*time.Second); err != nil {
		t.Fatal(err)
	}
	tsdb := filepath.Join(dir, "tsdb")
	if out, err := exec.Command(promtool, "tsdb", "create-blocks-from", "openmetrics", "-q", om, tsdb).CombinedOutput(); err != nil {
		t.Fatalf("promtool tsdb create-blocks-from: %v\n%s", err, out)
	}
	cfg := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfg, []byte("global: {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, prometheus, "--config.file="+cfg, "--storage.tsdb.path="+tsdb,
		"--web.listen-address="+addr, "--storage.tsdb.retention.time=1d", "--log.level=warn")
	var logs strings.Builder
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cancel()
		_ = cmd.Wait()
	}()
	base := "http://" + addr
	waitReady(t, base+"/-/ready", &logs)

	query := func(expr string) (int, error) {
		v := url.Values{"query": {expr}, "time": {fmt.Sprint(end.Unix())}}
		resp, err := http.Get(base + "/api/v1/query?" + v.Encode())
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		var r struct {
			Status, Error string
			Data          struct {
				Result []json.RawMessage
			}
		}
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			return 0, err
		}
		if r.Status != "success" {
			return 0, fmt.Errorf("%s", r.Error)
		}
		return len(r.Data.Result), nil
	}

	// Grafana's substitutions for job, namespace All, and the rate interval.
	grafana := strings.NewReplacer(`cluster=~"$cluster"`, `cluster=~".*"`, `job="$job"`, `job="`+DefaultJob+`"`, `namespace=~"$namespace"`, `namespace=~".*"`, "$__rate_interval", "2m")
	for where, exprs := range dashboardExprs(t) {
		for _, e := range exprs {
			n, err := query(grafana.Replace(e))
			switch {
			case err != nil:
				t.Errorf("%s: %v\n%s", where, err, e)
			case n == 0:
				t.Errorf("%s: no data\n%s", where, e)
			}
		}
	}
	f, err := Rules(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if _, err := query(r.Expr); err != nil {
				t.Errorf("alert %s: %v\n%s", r.Alert, err, r.Expr)
			}
		}
	}
	// The job and namespace variables find their values.
	for _, lv := range []struct{ selector, label, want string }{
		{"widget_build_info", "job", DefaultJob},
		{`widget_build_info{job="` + DefaultJob + `"}`, "namespace", "widget-system"},
	} {
		v := url.Values{"match[]": {lv.selector}, "start": {fmt.Sprint(start.Unix())}, "end": {fmt.Sprint(end.Unix())}}
		resp, err := http.Get(base + "/api/v1/label/" + lv.label + "/values?" + v.Encode())
		if err != nil {
			t.Fatal(err)
		}
		var r struct{ Data []string }
		err = json.NewDecoder(resp.Body).Decode(&r)
		resp.Body.Close()
		if err != nil || !contains(r.Data, lv.want) {
			t.Errorf("label_values(%s, %s) = %v (%v), want %s among them", lv.selector, lv.label, r.Data, err, lv.want)
		}
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func waitReady(t *testing.T, url string, logs *strings.Builder) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("prometheus not ready at %s within 60s:\n%s", url, logs.String())
}
