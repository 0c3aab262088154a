//go:build envtest

package migrate_test

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"sort"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/migrate"
	"github.com/widgetry/widget-operator/internal/testenv"
	"github.com/widgetry/widget-operator/internal/testenv/widgetenv"
)

// BenchmarkReencode measures re-encoding N Widgets (WIDGET_MIGRATE_BENCH_OBJECTS, default
// 10000) after a storage flip v1alpha1 -> v1, all against the same envtest apiserver (with
// the conversion webhook in the test process, apiserver and etcd on the same cores), in
// objects/s:
//
//	variant=a-migrator      this package's client backend with its defaults (8 workers, QPS 500)
//	variant=b-floor         unthrottled 8-worker loop of empty merge patches carrying
//	                        resourceVersion, after a paged LIST: the machine's limit
//	variant=c-get-put-qps5  sequential GET+PUT at client-go's default QPS 5/burst 10 (the
//	                        kube-storage-version-migrator's defaults) on a sample of
//	                        WIDGET_MIGRATE_BENCH_SAMPLE objects (default 500), extrapolated
//	variant=d-patch-qps100  sequential empty patches at QPS 100/burst 200 (Cluster API's)
//	variant=e-in-tree       kube-controller-manager's StorageVersionMigration through this
//	                        package's in-tree backend (kube-controller-manager attached for it)
//
// Before each run every Widget's etcd value is put back to its v1alpha1 encoding (and
// storedVersions to [v1alpha1 v1]), so every variant re-encodes every object. Each variant
// also reports the p99 latency of the apiserver's Widget requests during the run
// (apiserver_request_duration_seconds, delta of its /metrics before and after). The trim is
// left out (one request). Each run re-encodes all objects once: use -benchtime 1x. The
// ratios a/b and a/d (and b/d, the most a/d can be on the machine) are logged with -v; scripts/migrate-bench-ratios.sh prints the means
// and ratios of a whole `make bench` output.
func BenchmarkReencode(b *testing.B) {
	n := envInt(b, "WIDGET_MIGRATE_BENCH_OBJECTS", 10000)
	sample := min(n, envInt(b, "WIDGET_MIGRATE_BENCH_SAMPLE", 500))
	env := startEnv(b, testenv.Options{}, "fleet")
	createWidgets(b, env, "fleet", n)
	etcd := widgetenv.NewEtcd(env)
	original, err := etcd.List(context.Background(), widgetenv.WidgetPrefix+"fleet/")
	if err != nil || len(original) != n {
		b.Fatalf("snapshot of the v1alpha1 encoding: %d keys, %v", len(original), err)
	}
	widgetenv.SetStorageVersion(b, env, "v1", probeNamespace)
	gvr := schema.GroupVersionResource{Group: "widgetry.io", Version: "v1", Resource: "widgets"}

	// Totals over every run of each variant (-count repeats a sub-benchmark in this same
	// environment), for the ratios logged at the end.
	objects, seconds := map[string]float64{}, map[string]float64{}
	rate := func(name string) float64 {
		if seconds[name] == 0 {
			return 0
		}
		return objects[name] / seconds[name]
	}
	variants := []struct {
		name string
		objs int
		run  func(b *testing.B)
		// finish, when set, runs after the measurement so that every variant leaves all
		// objects re-encoded (c re-encodes only its sample inside the timer).
		finish func(b *testing.B)
	}{
		{"a-migrator", n, func(b *testing.B) {
			m := newMigrator(b, env)
			res, err := m.Migrate(context.Background(), migrate.Options{CRD: crd.WidgetName, ProgressNamespace: progressNamespace,
				Backend: migrate.BackendClient, NoTrim: true})
			if err != nil || res.Counts.Migrated != int64(n) || res.Counts.Unchanged != 0 {
				b.Fatalf("migrator: %+v, %v", res, err)
			}
		}, nil},
		{"b-floor", n, func(b *testing.B) {
			patchAll(b, metaClient(b, env, -1, 0), gvr, 8)
		}, nil},
		{"c-get-put-qps5", sample, func(b *testing.B) {
			getPut(b, env, gvr, sample)
		}, func(b *testing.B) {
			patchAll(b, metaClient(b, env, -1, 0), gvr, 8)
		}},
		{"d-patch-qps100", n, func(b *testing.B) {
			patchAll(b, metaClient(b, env, 100, 200), gvr, 1)
		}, nil},
		{"e-in-tree", n, nil, nil},
	}
	for _, v := range variants {
		b.Run("variant="+v.name, func(b *testing.B) {
			run := v.run
			if run == nil {
				b.StopTimer()
				env.StartControllerManager(b) // stopped at the end of this sub-benchmark
				run = func(b *testing.B) {
					m := newMigrator(b, env)
					res, err := m.Migrate(context.Background(), migrate.Options{CRD: crd.WidgetName, ProgressNamespace: progressNamespace,
						Backend: migrate.BackendInTree, InTreeTimeout: 10 * time.Minute})
					if err != nil {
						b.Fatalf("in-tree: %+v, %v", res, err)
					}
				}
			}
			var elapsed time.Duration
			var p99 float64
			for range b.N {
				b.StopTimer()
				resetEncoding(b, env, etcd, original)
				before := requestLatency(b, env)
				b.StartTimer()
				start := time.Now()
				run(b)
				elapsed += time.Since(start)
				b.StopTimer()
				p99 = math.Max(p99, requestLatency(b, env).minus(before).quantile(0.99))
				if v.finish != nil {
					v.finish(b)
				}
				assertStoredIn(b, env, "fleet", "v1", n)
			}
			objects[v.name] += float64(v.objs * b.N)
			seconds[v.name] += elapsed.Seconds()
			b.ReportMetric(float64(v.objs*b.N)/elapsed.Seconds(), "objects/s")
			b.ReportMetric(p99*1000, "apiserver-p99-ms")
		})
	}
	if a := rate("a-migrator"); a > 0 {
		if bb := rate("b-floor"); bb > 0 {
			b.Logf("a/b = %.2f (target >= 0.8): migrator %.0f objects/s, unthrottled floor %.0f", a/bb, a, bb)
		}
		if d := rate("d-patch-qps100"); d > 0 {
			b.Logf("a/d = %.2f (target >= 2.5): migrator %.0f objects/s, QPS-100 patches %.0f", a/d, a, d)
			// No migrator outruns the machine, so b/d bounds a/d: where the apiserver's
			// CPU caps b near d (a few cores, expensive writes), a/d cannot reach its target.
			if bb := rate("b-floor"); bb > 0 {
				b.Logf("b/d = %.2f: the most a/d can be on this machine", bb/d)
			}
		}
	}
}

// resetEncoding puts every Widget's v1alpha1 encoding back into etcd and storedVersions
// back to [v1alpha1 v1], then waits until the apiserver's cache serves the restored objects.
func resetEncoding(b *testing.B, env *testenv.Env, etcd *widgetenv.Etcd, original map[string][]byte) {
	b.Helper()
	ctx := context.Background()
	keys := make([]string, 0, len(original))
	for k := range original {
		keys = append(keys, k)
	}
	parallel(b, len(keys), func(i int) error { return etcd.Put(ctx, keys[i], original[keys[i]]) })
	c := &apiextensionsv1.CustomResourceDefinition{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: crd.WidgetName}, c); err != nil {
		b.Fatal(err)
	}
	c.Status.StoredVersions = []string{"v1alpha1", "v1"}
	if err := env.Client.Status().Update(ctx, c); err != nil {
		b.Fatal(err)
	}
	// A consistent LIST waits for the watch cache to reach etcd's current revision.
	if _, err := metaClient(b, env, -1, 0).Resource(schema.GroupVersionResource{Group: "widgetry.io", Version: "v1", Resource: "widgets"}).
		List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
		b.Fatal(err)
	}
	assertStoredIn(b, env, "fleet", "v1alpha1", len(original))
}

// metaClient is a metadata client with the given client-side limits (qps < 0: none).
func metaClient(b *testing.B, env *testenv.Env, qps float32, burst int) metadata.Interface {
	b.Helper()
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = qps, burst
	m, err := metadata.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// patchAll lists every Widget (pages of 500) and writes each with an empty merge patch
// carrying its resourceVersion, on workers goroutines.
func patchAll(b *testing.B, mc metadata.Interface, gvr schema.GroupVersionResource, workers int) {
	b.Helper()
	ctx := context.Background()
	res := mc.Resource(gvr)
	var items []metav1.PartialObjectMetadata
	cont := ""
	for {
		list, err := res.List(ctx, metav1.ListOptions{Limit: 500, Continue: cont})
		if err != nil {
			b.Fatal(err)
		}
		items = append(items, list.Items...)
		if cont = list.Continue; cont == "" {
			break
		}
	}
	parallelOn(b, workers, len(items), func(i int) error {
		o := &items[i]
		patch := fmt.Appendf(nil, `{"metadata":{"resourceVersion":%q}}`, o.ResourceVersion)
		_, err := res.Namespace(o.Namespace).Patch(ctx, o.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	})
}

// getPut re-encodes the first sample Widgets by a GET and a PUT of the whole object each, at
// client-go's default limits.
func getPut(b *testing.B, env *testenv.Env, gvr schema.GroupVersionResource, sample int) {
	b.Helper()
	ctx := context.Background()
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = 5, 10
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	res := dc.Resource(gvr).Namespace("fleet")
	for i := range sample {
		name := fmt.Sprintf("widget-%05d", i)
		obj, err := res.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := res.Update(ctx, obj, metav1.UpdateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

// histogram is the cumulative bucket counts of apiserver_request_duration_seconds for
// Widget requests, summed over verbs and other labels.
type histogram map[float64]uint64

func requestLatency(b *testing.B, env *testenv.Env) histogram {
	b.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(env.Config)
	if err != nil {
		b.Fatal(err)
	}
	body, err := dc.RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		b.Fatalf("read the apiserver's /metrics: %v", err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		b.Fatalf("parse the apiserver's metrics: %v", err)
	}
	h := histogram{}
	fam := families["apiserver_request_duration_seconds"]
	if fam == nil {
		b.Fatal("the apiserver exports no apiserver_request_duration_seconds")
	}
	for _, m := range fam.GetMetric() {
		if label(m, "resource") != "widgets" {
			continue
		}
		for _, bk := range m.GetHistogram().GetBucket() {
			h[bk.GetUpperBound()] += bk.GetCumulativeCount()
		}
	}
	return h
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func (h histogram) minus(o histogram) histogram {
	d := histogram{}
	for le, c := range h {
		d[le] = c - o[le]
	}
	return d
}

// quantile interpolates linearly inside the bucket, as PromQL's histogram_quantile does.
func (h histogram) quantile(q float64) float64 {
	bounds := make([]float64, 0, len(h))
	for le := range h {
		bounds = append(bounds, le)
	}
	sort.Float64s(bounds)
	if len(bounds) == 0 {
		return 0
	}
	total := h[bounds[len(bounds)-1]]
	if total == 0 {
		return 0
	}
	rank := q * float64(total)
	prevBound, prevCount := 0.0, uint64(0)
	for _, le := range bounds {
		c := h[le]
		if float64(c) >= rank {
			if math.IsInf(le, 1) {
				return prevBound
			}
			if c == prevCount {
				return le
			}
			return prevBound + (le-prevBound)*(rank-float64(prevCount))/float64(c-prevCount)
		}
		prevBound, prevCount = le, c
	}
	return prevBound
}
