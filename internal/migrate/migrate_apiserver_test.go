//go:build envtest

package migrate_test

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/widgetry/widget-operator/api/v1"
	"github.com/widgetry/widget-operator/internal/conversion/conversiontest"
	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/migrate"
	"github.com/widgetry/widget-operator/internal/testenv"
	"github.com/widgetry/widget-operator/internal/testenv/widgetenv"
)

// TestMigrateClientForwardAndReverse is the main proof on a real apiserver: Widgets written
// through both versions, storage flipped to v1, migrated (auto, which must fall back to the
// client backend on envtest: the API is served but no controller runs); every object reads
// back unchanged through both versions, etcd holds each in v1, storedVersions is [v1]. Then
// the reverse: storage back to v1alpha1, migrate --to v1alpha1.
func TestMigrateClientForwardAndReverse(t *testing.T) {
	t.Parallel() // each test has its own control plane; they overlap their waits
	n := widgetenv.EnvInt(t, "WIDGET_MIGRATE_OBJECTS", 1000)
	env := startEnv(t, testenv.Options{}, "fleet")
	ctx := context.Background()
	widgetenv.CreateWidgets(t, env.Client, "fleet", n)
	assertStoredIn(t, env, "fleet", "v1alpha1", n)
	before := readViews(t, env, "fleet")
	m := newMigrator(t, env)

	t.Run("refuses --to a version that is not the storage version", func(t *testing.T) {
		_, err := m.Migrate(ctx, migrate.Options{CRD: crd.WidgetName, To: "v1", ProgressNamespace: progressNamespace, Backend: migrate.BackendClient})
		if !migrate.IsRefused(err) || !strings.Contains(err.Error(), "kubectl patch crd widgets.widgetry.io --type=json") {
			t.Fatalf("got %v, want a refusal naming the patch that makes v1 the storage version", err)
		}
	})
	t.Run("nothing to do before the flip", func(t *testing.T) {
		res, err := m.Migrate(ctx, migrate.Options{CRD: crd.WidgetName, ProgressNamespace: progressNamespace, Backend: migrate.BackendClient})
		if err != nil || !res.NothingToDo {
			t.Fatalf("got %+v, %v; want nothing to do: storedVersions is [v1alpha1]", res, err)
		}
	})

	t.Run("forward to v1, auto falls back to the client backend", func(t *testing.T) {
		widgetenv.SetStorageVersion(t, env, "v1", probeNamespace)
		if got := storedVersions(t, env); !slices.Equal(got, []string{"v1alpha1", "v1"}) {
			t.Fatalf("storedVersions after the flip %v", got)
		}
		log, logs := newLogger(t)
		start := time.Now()
		res, err := m.Migrate(ctx, migrate.Options{CRD: crd.WidgetName, ProgressNamespace: progressNamespace,
			Backend: migrate.BackendAuto, InTreeProbeTimeout: 3 * time.Second, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("migrated %d objects in %s (%.0f obj/s): %+v", res.Counts.Done(), time.Since(start), res.Rate, res.Counts)
		if res.Backend != migrate.BackendClient || !strings.Contains(res.FellBack, "no controller picked up") ||
			!strings.Contains(logs.String(), "falling back to the client migrator") {
			t.Errorf("backend %s, fell back because %q; logs:\n%s", res.Backend, res.FellBack, logs)
		}
		if res.Counts.Migrated != int64(n) || res.Counts.Unchanged != 0 || res.Counts.Conflict+res.Counts.NotFound+res.Counts.Error != 0 {
			t.Errorf("counts %+v, want %d migrated, all rewritten", res.Counts, n)
		}
		assertStoredIn(t, env, "fleet", "v1", n)
		assertSameViews(t, before, readViews(t, env, "fleet"))
		if got := storedVersions(t, env); !slices.Equal(got, []string{"v1"}) {
			t.Errorf("storedVersions %v, want [v1]", got)
		}
		p := progressObject(t, env)
		if p.Phase != migrate.PhaseSucceeded || p.Counts.Migrated != int64(n) || p.Backend != "client" || p.Continue != "" {
			t.Errorf("progress object %+v", p)
		}
	})

	t.Run("metrics from the progress object", func(t *testing.T) {
		c := migrate.NewProgressCollector(env.Client, progressNamespace)
		want := `
# HELP widget_migration_failed 1 if the last storage migration of the CRD ended in an error or a refusal to trim, else 0.
# TYPE widget_migration_failed gauge
widget_migration_failed{crd="widgets.widgetry.io"} 0
# HELP widget_migration_in_progress 1 while a storage migration of the CRD is running or was interrupted and not resumed yet, else 0.
# TYPE widget_migration_in_progress gauge
widget_migration_in_progress{crd="widgets.widgetry.io"} 0
# HELP widget_migration_objects_total Objects handled by the current or last storage migration of a CRD, by result (migrated, conflict, not_found, error). Resets when a new migration starts.
# TYPE widget_migration_objects_total counter
widget_migration_objects_total{crd="widgets.widgetry.io",result="conflict"} 0
widget_migration_objects_total{crd="widgets.widgetry.io",result="error"} 0
widget_migration_objects_total{crd="widgets.widgetry.io",result="migrated"} ` + itoa(n) + `
widget_migration_objects_total{crd="widgets.widgetry.io",result="not_found"} 0
`
		if err := testutil.CollectAndCompare(c, strings.NewReader(want), migrate.MetricObjectsTotal, migrate.MetricInProgress, migrate.MetricFailed); err != nil {
			t.Error(err)
		}
		if got := testutil.CollectAndCount(c, migrate.MetricLastProgressTimestamp); got != 1 {
			t.Errorf("%d %s series, want 1", got, migrate.MetricLastProgressTimestamp)
		}
	})

	t.Run("--backend=in-tree without a controller is an error", func(t *testing.T) {
		widgetenv.SetStorageVersion(t, env, "v1alpha1", probeNamespace)
		widgetenv.SetStorageVersion(t, env, "v1", probeNamespace) // storedVersions [v1 v1alpha1]
		_, err := m.Migrate(ctx, migrate.Options{CRD: crd.WidgetName, ProgressNamespace: progressNamespace,
			Backend: migrate.BackendInTree, InTreeProbeTimeout: 2 * time.Second})
		if err == nil || migrate.IsRefused(err) || !strings.Contains(err.Error(), "no controller picked up") || !strings.Contains(err.Error(), "use --backend=client") {
			t.Fatalf("got %v", err)
		}
		if p := progressObject(t, env); p.Phase != migrate.PhaseFailed {
			t.Errorf("progress phase %s, want Failed", p.Phase)
		}
	})

	t.Run("reverse to v1alpha1", func(t *testing.T) {
		widgetenv.SetStorageVersion(t, env, "v1alpha1", probeNamespace)
		res, err := m.Migrate(ctx, migrate.Options{CRD: crd.WidgetName, To: "v1alpha1", ProgressNamespace: progressNamespace, Backend: migrate.BackendClient})
		if err != nil {
			t.Fatal(err)
		}
		if res.Counts.Migrated != int64(n) || res.Counts.Error != 0 {
			t.Errorf("counts %+v, want %d migrated", res.Counts, n)
		}
		assertStoredIn(t, env, "fleet", "v1alpha1", n)
		assertSameViews(t, before, readViews(t, env, "fleet"))
		if got := storedVersions(t, env); !slices.Equal(got, []string{"v1alpha1"}) {
			t.Errorf("storedVersions %v, want [v1alpha1]", got)
		}
	})

	t.Run("status subresource", func(t *testing.T) {
		widgetenv.SetStorageVersion(t, env, "v1", probeNamespace)
		res, err := m.Migrate(ctx, migrate.Options{CRD: crd.WidgetName, ProgressNamespace: progressNamespace, Backend: migrate.BackendClient, StatusSubresource: true})
		if err != nil {
			t.Fatal(err)
		}
		if res.Counts.Migrated != int64(n) {
			t.Errorf("counts %+v, want %d migrated", res.Counts, n)
		}
		assertStoredIn(t, env, "fleet", "v1", n)
		assertSameViews(t, before, readViews(t, env, "fleet"))
		if got := storedVersions(t, env); !slices.Equal(got, []string{"v1"}) {
			t.Errorf("storedVersions %v, want [v1]", got)
		}
	})
	t.Run("two migrators at once: one stops, the other finishes", func(t *testing.T) {
		widgetenv.SetStorageVersion(t, env, "v1alpha1", probeNamespace)
		errs := make(chan error, 2)
		for range 2 {
			go func() {
				_, err := newMigrator(t, env).Migrate(ctx, migrate.Options{CRD: crd.WidgetName, ProgressNamespace: progressNamespace, Backend: migrate.BackendClient})
				errs <- err
			}()
		}
		failed := 0
		for range 2 {
			if err := <-errs; err != nil {
				failed++
				if !strings.Contains(err.Error(), "another migration of CRD widgets.widgetry.io is probably running") {
					t.Errorf("the losing migrator says %v", err)
				}
			}
		}
		if failed > 1 {
			t.Errorf("both migrators failed")
		}
		assertStoredIn(t, env, "fleet", "v1alpha1", n)
		if got := storedVersions(t, env); !slices.Equal(got, []string{"v1alpha1"}) {
			t.Errorf("storedVersions %v, want [v1alpha1]", got)
		}
	})

	t.Run("drop the managedFields entries of v1alpha1", func(t *testing.T) {
		withEntries := func() (n int) {
			hubs := &v1.WidgetList{}
			if err := env.Client.List(ctx, hubs, client.InNamespace("fleet")); err != nil {
				t.Fatal(err)
			}
			for _, w := range hubs.Items {
				if slices.ContainsFunc(w.ManagedFields, func(e metav1.ManagedFieldsEntry) bool { return e.APIVersion == "widgetry.io/v1alpha1" }) {
					n++
				}
			}
			return n
		}
		want := withEntries()
		if want == 0 {
			t.Fatal("no object has managedFields entries of v1alpha1 to drop")
		}
		if _, err := m.DropManagedFields(ctx, crd.WidgetName, "v1alpha1"); !migrate.IsRefused(err) || !strings.Contains(err.Error(), "stop serving it first") {
			t.Fatalf("while v1alpha1 is served: %v, want a refusal", err)
		}
		// As at unserve: everything stored as v1, v1alpha1 no longer served.
		widgetenv.SetStorageVersion(t, env, "v1", probeNamespace)
		if _, err := m.Migrate(ctx, migrate.Options{CRD: crd.WidgetName, ProgressNamespace: progressNamespace, Backend: migrate.BackendClient}); err != nil {
			t.Fatal(err)
		}
		setServed(t, env, "v1alpha1", false)
		counts, err := m.DropManagedFields(ctx, crd.WidgetName, "v1alpha1")
		if err != nil || counts.Migrated != int64(want) {
			t.Fatalf("dropped from %d objects (%+v, %v), want %d", counts.Migrated, counts, err, want)
		}
		if left := withEntries(); left != 0 {
			t.Errorf("%d objects still have managedFields entries of v1alpha1", left)
		}
		setServed(t, env, "v1alpha1", true)
		after := readViews(t, env, "fleet")
		for name, w := range before.hub {
			if d := conversiontest.Diff(w.Spec, after.hub[name].Spec); d != "" {
				t.Fatalf("%s: spec changed %s", name, d)
			}
		}
	})
}

// TestTrimAbortsWhenStorageChangesMidRun: another writer changes the CRD's storage while the
// migration runs; the trim refuses with a clear message and leaves storedVersions alone.
func TestTrimAbortsWhenStorageChangesMidRun(t *testing.T) {
	t.Parallel() // each test has its own control plane; they overlap their waits
	// Half the objects are enough for a flip in the middle of the run.
	n := widgetenv.EnvInt(t, "WIDGET_MIGRATE_OBJECTS", 1000) / 2
	env := startEnv(t, testenv.Options{}, "fleet")
	ctx := context.Background()
	widgetenv.CreateWidgets(t, env.Client, "fleet", n)
	m := newMigrator(t, env)

	for _, tc := range []struct {
		name    string
		flips   []string // storage versions another writer sets mid-run, in order
		message string
	}{
		{"flip to v1alpha1", []string{"v1alpha1"}, "the storage version of CRD widgets.widgetry.io changed from v1 to v1alpha1 during the migration"},
		{"flip to v1alpha1 and back to v1", []string{"v1alpha1", "v1"}, "the spec of CRD widgets.widgetry.io changed during the migration"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			widgetenv.SetStorageVersion(t, env, "v1", probeNamespace)
			flipped := false
			var storedAfterFlip []string
			onProgress := func(s migrate.Status) {
				if flipped || s.Counts.Done() < int64(n)/3 {
					return
				}
				flipped = true
				for _, v := range tc.flips {
					widgetenv.SetStorageVersion(t, env, v, probeNamespace)
				}
				storedAfterFlip = storedVersions(t, env)
			}
			res, err := m.Migrate(ctx, migrate.Options{CRD: crd.WidgetName, ProgressNamespace: progressNamespace,
				Backend: migrate.BackendClient, Seal: testSeal, OnProgress: onProgress, ProgressInterval: 10 * time.Millisecond})
			if !flipped {
				t.Fatalf("the migration ended (%+v, %v) before the other writer flipped the storage", res, err)
			}
			if !migrate.IsRefused(err) || !strings.Contains(err.Error(), tc.message) || !strings.Contains(err.Error(), "rerun") {
				t.Fatalf("got %v; want a refusal saying %q and to rerun", err, tc.message)
			}
			t.Logf("refusal: %v", err)
			if got := storedVersions(t, env); !slices.Equal(got, storedAfterFlip) || len(got) < 2 {
				t.Errorf("storedVersions %v after the refused trim, want them unchanged: %v", got, storedAfterFlip)
			}
			if p := progressObject(t, env); p.Phase != migrate.PhaseFailed || !strings.Contains(p.Message, "not trimming") {
				t.Errorf("progress object phase %s message %q, want Failed with the refusal", p.Phase, p.Message)
			}
		})
	}

	t.Run("a 410 Gone mid-LIST restarts the LIST, skipping what was handed out", func(t *testing.T) {
		widgetenv.SetStorageVersion(t, env, "v1", probeNamespace)
		cfg := rest.CopyConfig(env.Config)
		cfg.QPS, cfg.Burst = migrate.DefaultQPS, migrate.DefaultBurst
		var expired atomic.Int32
		cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
			return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
				// The third page's LIST answers as if etcd had compacted the token's revision.
				if req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, "/widgets") && req.URL.Query().Get("continue") != "" && expired.Add(1) == 2 {
					return goneResponse(req), nil
				}
				return rt.RoundTrip(req)
			})
		}
		gm, err := migrate.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		log, logs := newLogger(t)
		res, err := gm.Migrate(ctx, migrate.Options{CRD: crd.WidgetName, ProgressNamespace: progressNamespace,
			Backend: migrate.BackendClient, Seal: testSeal, PageSize: int64(n / 5), Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(logs.String(), "the LIST continue token expired") || expired.Load() < 2 {
			t.Errorf("no 410 restart happened (%d continued LISTs); logs:\n%s", expired.Load(), logs)
		}
		// Each object handed out exactly once: none skipped (etcd below), none twice.
		if res.Counts.Migrated != int64(n) || res.Counts.Done() != int64(n) {
			t.Errorf("counts %+v, want each of %d objects migrated exactly once", res.Counts, n)
		}
		assertStoredIn(t, env, "fleet", "v1", n)
		if got := storedVersions(t, env); !slices.Equal(got, []string{"v1"}) {
			t.Errorf("storedVersions %v, want [v1]", got)
		}
		widgetenv.SetStorageVersion(t, env, "v1alpha1", probeNamespace) // something to do for the next subtest
	})

	t.Run("a rerun under the new spec migrates and trims", func(t *testing.T) {
		widgetenv.SetStorageVersion(t, env, "v1", probeNamespace)
		res, err := m.Migrate(ctx, migrate.Options{CRD: crd.WidgetName, ProgressNamespace: progressNamespace, Backend: migrate.BackendClient, Seal: testSeal})
		if err != nil {
			t.Fatal(err)
		}
		if res.Resumed {
			t.Errorf("resumed a migration started under another CRD generation")
		}
		assertStoredIn(t, env, "fleet", "v1", n)
		if got := storedVersions(t, env); !slices.Equal(got, []string{"v1"}) {
			t.Errorf("storedVersions %v, want [v1]", got)
		}
	})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// goneResponse is the apiserver's answer to a continue token whose revision was compacted.
func goneResponse(req *http.Request) *http.Response {
	body := `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","reason":"Expired","code":410,` +
		`"message":"The provided continue parameter is too old to display a consistent list result."}`
	return &http.Response{StatusCode: http.StatusGone, Status: "410 Gone", Request: req, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Content-Type": []string{"application/json"}}, Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body))}
}
