//go:build envtest

package migrate_test

import (
	"context"
	"fmt"
	"math"
	"sort"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
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
// 10000) after a storage flip v1alpha1 -> v1, in objects/s, all against the same envtest
// apiserver, with the conversion webhook and the chart's admission webhooks (mutating and
// validating, on creates and updates of widgets) served in the test process, apiserver and
// etcd on the same cores. Every variant re-encodes all N objects inside the timer, so all are
// like for like; they differ in the path they write through (the main resource, which the
// admission webhooks see, or the status subresource, which they do not) and in the client:
//
//	variant=a-migrator-main      (a) this package's client backend with its defaults (8
//	                             workers, QPS 500) on the CRD without its status
//	                             subresource: it rewrites through the main resource, and the
//	                             admission webhooks see every rewrite
//	variant=a1-migrator-status   (a') the same on the CRD as shipped: it rewrites through the
//	                             status subresource, which the admission webhooks do not see
//	                             (what widgetctl migrate does with the Widget CRD)
//	variant=b-floor              (b) the naive unthrottled loop: after a paged LIST, 8
//	                             workers send empty merge patches carrying resourceVersion to
//	                             the main resource
//	variant=b1-floor-status      (b') the same naive loop writing through the status
//	                             subresource: b is a's baseline, b' is a''s
//	variant=c-svm-put-qps40      (c) kube-storage-version-migrator as it behaves
//	                             (pkg/migrator/core.go): LIST of whole objects in pages of 500,
//	                             one worker PUTs each object as listed to the main resource (a
//	                             GET only after a conflict), at the limits its deployment
//	                             manifest gives it (manifests/migrator.yaml: --kube-api-qps=40
//	                             --kube-api-burst=1000)
//	variant=d-capi-patch-qps100  (d) Cluster API's crdmigrator as it behaves (v1.14,
//	                             controllers/crdmigrator/crd_migrator.go): metadata LIST in
//	                             pages of 500, then, one object at a time, a merge patch of
//	                             apiVersion, kind, namespace, name and resourceVersion to the
//	                             main resource (its default for a CRD), at its manager's
//	                             default limits (core/main.go: --kube-api-qps 100,
//	                             --kube-api-burst 200)
//	variant=d1-capi-patch-status-qps100
//	                             (d') the same through the status subresource, as Cluster API
//	                             configures its own CRDs (UseStatusForStorageVersionMigration)
//	variant=e-in-tree            kube-controller-manager's StorageVersionMigration through this
//	                             package's in-tree backend (kube-controller-manager attached for it)
//
// Before each run every Widget's etcd value is put back to its v1alpha1 encoding (and
// storedVersions to [v1alpha1 v1]), so every variant re-encodes every object. Each variant
// also reports the p99 latency of the apiserver's Widget requests during the run
// (apiserver_request_duration_seconds, delta of its /metrics before and after) and the
// AdmissionReviews the webhooks answered per object rewritten. The trim is left out (one
// request). Each run re-encodes all objects once: use -benchtime 1x. The ratios a/b (target
// >= 0.9) and a'/b' (target >= 1.0), and without a target a/c, a/d, a'/c, a'/d, a'/d', a/e
// and a'/e, are logged with -v; scripts/migrate-bench-ratios.sh prints the means and ratios
// of a whole `make bench` output.
func BenchmarkReencode(b *testing.B) {
	n := widgetenv.EnvInt(b, "WIDGET_MIGRATE_BENCH_OBJECTS", 10000)
	env := startEnv(b, testenv.Options{}, "fleet")
	reviews := widgetenv.ServeAdmission(b, env, probeNamespace)
	widgetenv.CreateWidgets(b, env.Client, "fleet", n)
	etcd := widgetenv.NewEtcd(env)
	original, err := etcd.List(context.Background(), widgetenv.WidgetPrefix+"fleet/")
	if err != nil || len(original) != n {
		b.Fatalf("snapshot of the v1alpha1 encoding: %d keys, %v", len(original), err)
	}
	widgetenv.SetStorageVersion(b, env, "v1", probeNamespace)
	gvr := schema.GroupVersionResource{Group: "widgetry.io", Version: "v1", Resource: "widgets"}
	migrator := func(b *testing.B) {
		m := newMigrator(b, env)
		res, err := m.Migrate(context.Background(), migrate.Options{CRD: crd.WidgetName, ProgressNamespace: progressNamespace,
			Backend: migrate.BackendClient, NoTrim: true})
		if err != nil || res.Counts.Migrated != int64(n) || res.Counts.Unchanged != 0 {
			b.Fatalf("migrator: %+v, %v", res, err)
		}
	}

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
		run  func(b *testing.B)
		// mainResource runs the variant on the CRD without its status subresource.
		mainResource bool
	}{
		{name: "a-migrator-main", run: migrator, mainResource: true},
		{name: "a1-migrator-status", run: migrator},
		{name: "b-floor", run: func(b *testing.B) { patchAll(b, metaClient(b, env, -1, 0), gvr, 8) }},
		{name: "b1-floor-status", run: func(b *testing.B) { patchAll(b, metaClient(b, env, -1, 0), gvr, 8, "status") }},
		{name: "c-svm-put-qps40", run: func(b *testing.B) { svmPut(b, env, gvr) }},
		{name: "d-capi-patch-qps100", run: func(b *testing.B) { capiPatch(b, env, gvr) }},
		{name: "d1-capi-patch-status-qps100", run: func(b *testing.B) { capiPatch(b, env, gvr, "status") }},
		{name: "e-in-tree"},
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
			if v.mainResource {
				b.StopTimer()
				setStatusSubresource(b, env, false)
				defer setStatusSubresource(b, env, true)
			}
			var elapsed time.Duration
			var p99 float64
			var admitted int64
			for range b.N {
				b.StopTimer()
				resetEncoding(b, env, etcd, original)
				before, reviewsBefore := requestLatency(b, env), reviews()
				b.StartTimer()
				start := time.Now()
				run(b)
				elapsed += time.Since(start)
				b.StopTimer()
				admitted += reviews() - reviewsBefore
				p99 = math.Max(p99, requestLatency(b, env).minus(before).quantile(0.99))
				assertStoredIn(b, env, "fleet", "v1", n)
			}
			objects[v.name] += float64(n * b.N)
			seconds[v.name] += elapsed.Seconds()
			b.ReportMetric(float64(n), "objects") // for the report: every variant on the same objects
			b.ReportMetric(float64(n*b.N)/elapsed.Seconds(), "objects/s")
			b.ReportMetric(p99*1000, "apiserver-p99-ms")
			b.ReportMetric(float64(admitted)/float64(n*b.N), "admission-reviews/object")
		})
	}
	for _, r := range []struct {
		label, x, y string
		target      float64 // 0: no target
		what        string
	}{
		{"a/b", "a-migrator-main", "b-floor", 0.9, "both through the main resource, admission included"},
		{"a'/b'", "a1-migrator-status", "b1-floor-status", 1.0, "both through the status subresource"},
		{"a/c", "a-migrator-main", "c-svm-put-qps40", 0, "both through the main resource"},
		{"a/d", "a-migrator-main", "d-capi-patch-qps100", 0, "both through the main resource"},
		{"a'/c", "a1-migrator-status", "c-svm-put-qps40", 0, "a' through /status, c through the main resource"},
		{"a'/d", "a1-migrator-status", "d-capi-patch-qps100", 0, "a' through /status, d through the main resource"},
		{"a'/d'", "a1-migrator-status", "d1-capi-patch-status-qps100", 0, "both through the status subresource"},
		{"a/e", "a-migrator-main", "e-in-tree", 0, "e includes kube-controller-manager's pick-up"},
		{"a'/e", "a1-migrator-status", "e-in-tree", 0, "e includes kube-controller-manager's pick-up"},
	} {
		x, y := rate(r.x), rate(r.y)
		if x == 0 || y == 0 {
			continue
		}
		target := ""
		if r.target > 0 {
			verdict := "ok"
			if x/y < r.target {
				verdict = "MISSED"
			}
			target = fmt.Sprintf(" (target >= %.1f) %s", r.target, verdict)
		}
		b.Logf("%s = %.2f%s: %s %.0f objects/s, %s %.0f (%s)", r.label, x/y, target, r.x, x, r.y, y, r.what)
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
	widgetenv.Parallel(b, 8, len(keys), func(i int) error { return etcd.Put(ctx, keys[i], original[keys[i]]) })
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

// limited is env's config with the given client-side limits (qps < 0: none).
func limited(env *testenv.Env, qps float32, burst int) *rest.Config {
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = qps, burst
	return cfg
}

// metaClient is a metadata client with the given client-side limits (qps < 0: none).
func metaClient(b *testing.B, env *testenv.Env, qps float32, burst int) metadata.Interface {
	b.Helper()
	m, err := metadata.NewForConfig(limited(env, qps, burst))
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// dynamicClient is a dynamic client with the given client-side limits (qps < 0: none).
func dynamicClient(b *testing.B, env *testenv.Env, qps float32, burst int) dynamic.Interface {
	b.Helper()
	d, err := dynamic.NewForConfig(limited(env, qps, burst))
	if err != nil {
		b.Fatal(err)
	}
	return d
}

// patchAll lists every Widget (pages of 500) and writes each with an empty merge patch
// carrying its resourceVersion, on workers goroutines, to the main resource or to the given
// subresource ("status").
func patchAll(b *testing.B, mc metadata.Interface, gvr schema.GroupVersionResource, workers int, subresource ...string) {
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
	widgetenv.Parallel(b, workers, len(items), func(i int) error {
		o := &items[i]
		patch := fmt.Appendf(nil, `{"metadata":{"resourceVersion":%q}}`, o.ResourceVersion)
		_, err := res.Namespace(o.Namespace).Patch(ctx, o.Name, types.MergePatchType, patch, metav1.PatchOptions{}, subresource...)
		return err
	})
}

// svmPut re-encodes every Widget as kube-storage-version-migrator does
// (kubernetes-sigs/kube-storage-version-migrator, pkg/migrator/core.go: defaultChunkLimit
// 500, defaultConcurrency 1, migrator.Run/migrateList/try) at the limits of its deployment
// (manifests/migrator.yaml: --kube-api-qps=40 --kube-api-burst=1000, which
// cmd/migrator/app/migrator.go sets on the rest.Config of its dynamic client): LIST whole
// objects page by page, and PUT each object as listed to the main resource (svmMigrateOne).
// It also saves the continue token in its StorageVersionMigration after each page, one
// request per 500 objects, which is left out (there is no such object here).
func svmPut(b *testing.B, env *testenv.Env, gvr schema.GroupVersionResource) {
	b.Helper()
	ctx := context.Background()
	res := dynamicClient(b, env, 40, 1000).Resource(gvr)
	for cont := ""; ; {
		list, err := res.Namespace(metav1.NamespaceAll).List(ctx, metav1.ListOptions{Limit: 500, Continue: cont})
		if err != nil {
			b.Fatal(err)
		}
		for i := range list.Items {
			if err := svmMigrateOne(ctx, res, &list.Items[i]); err != nil {
				b.Fatal(err)
			}
		}
		if cont = list.GetContinue(); cont == "" {
			return
		}
	}
}

// svmMigrateOne is the storage-version-migrator's migrateOneItem: PUT, and after a Conflict
// GET and PUT again.
func svmMigrateOne(ctx context.Context, res dynamic.NamespaceableResourceInterface, obj *unstructured.Unstructured) error {
	ns := obj.GetNamespace()
	for {
		_, err := res.Namespace(ns).Update(ctx, obj, metav1.UpdateOptions{})
		if !apierrors.IsConflict(err) {
			return client.IgnoreNotFound(err)
		}
		if obj, err = res.Namespace(ns).Get(ctx, obj.GetName(), metav1.GetOptions{}); err != nil {
			return client.IgnoreNotFound(err)
		}
	}
}

// capiPatch re-encodes every Widget as Cluster API's crdmigrator does (kubernetes-sigs/
// cluster-api v1.14.0, controllers/crdmigrator/crd_migrator.go: listObjectsFromAPIReader,
// a metadata LIST in pages of 500 through the API reader; reconcileStorageVersionMigration,
// then, one object at a time, a merge patch of apiVersion, kind, namespace, name and
// resourceVersion, to the main resource or, with UseStatusForStorageVersionMigration, to
// the status subresource; Conflict and NotFound mean done; the controller runs with
// concurrency 1), at its manager's default client limits (core/main.go: --kube-api-qps 100,
// --kube-api-burst 200; Cluster API v1.10 to v1.12 had 20/30, and up to v1.13 it sent a
// server-side apply with the uid added instead of the merge patch).
func capiPatch(b *testing.B, env *testenv.Env, gvr schema.GroupVersionResource, subresource ...string) {
	b.Helper()
	ctx := context.Background()
	lister := metaClient(b, env, 100, 200)
	var items []metav1.PartialObjectMetadata
	for cont := ""; ; {
		list, err := lister.Resource(gvr).Namespace(metav1.NamespaceAll).List(ctx, metav1.ListOptions{Limit: 500, Continue: cont})
		if err != nil {
			b.Fatal(err)
		}
		items = append(items, list.Items...)
		if cont = list.Continue; cont == "" {
			break
		}
	}
	res := dynamicClient(b, env, 100, 200).Resource(gvr)
	for _, o := range items {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(gvr.GroupVersion().WithKind("Widget"))
		u.SetNamespace(o.Namespace)
		u.SetName(o.Name)
		u.SetResourceVersion(o.ResourceVersion)
		data, err := u.MarshalJSON()
		if err != nil {
			b.Fatal(err)
		}
		_, err = res.Namespace(o.Namespace).Patch(ctx, o.Name, types.MergePatchType, data, metav1.PatchOptions{}, subresource...)
		if err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			b.Fatal(err)
		}
	}
}

// histogram is the cumulative bucket counts of apiserver_request_duration_seconds for
// Widget requests, summed over verbs and other labels.
type histogram map[float64]uint64

func requestLatency(b *testing.B, env *testenv.Env) histogram {
	b.Helper()
	families := env.APIServerMetrics(b)
	h := histogram{}
	fam := families["apiserver_request_duration_seconds"]
	if fam == nil {
		b.Fatal("the apiserver exports no apiserver_request_duration_seconds")
	}
	for _, m := range fam.GetMetric() {
		if testenv.Label(m, "resource") != "widgets" {
			continue
		}
		for _, bk := range m.GetHistogram().GetBucket() {
			h[bk.GetUpperBound()] += bk.GetCumulativeCount()
		}
	}
	return h
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
