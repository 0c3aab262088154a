package migrate_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	v1 "github.com/widgetry/widget-operator/api/v1"
	"github.com/widgetry/widget-operator/api/v1alpha1"
	"github.com/widgetry/widget-operator/internal/conversion/conversiontest"
	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/migrate"
	"github.com/widgetry/widget-operator/internal/testenv"
	"github.com/widgetry/widget-operator/internal/testenv/widgetenv"
)

// Sizes of the integration tests (widgetenv.EnvInt); `make test-long` raises them.
//
//	WIDGET_MIGRATE_OBJECTS        objects of the main proofs (default 1000)
//	WIDGET_MIGRATE_CRASH_OBJECTS  objects of the crash-and-resume proof (default 2000)
//	WIDGET_MIGRATE_KILLS          kill points of the crash-and-resume proof (default 3)

// progressNamespace holds the progress ConfigMaps in the tests; probeNamespace the storage
// probes of widgetenv.
const (
	progressNamespace = "widget-system"
	probeNamespace    = "probe"
	// testSeal stands for the chart's migrate hook in tests that resume: only sealed
	// checkpoints resume.
	testSeal = "test migrate hook"
)

// startEnv boots envtest with the Widget CRD stored in v1alpha1 and creates the namespaces.
func startEnv(t testing.TB, opts testenv.Options, namespaces ...string) *testenv.Env {
	t.Helper()
	env := widgetenv.StartWithConversionWebhook(t, "v1alpha1", opts)
	for _, ns := range append([]string{progressNamespace, probeNamespace}, namespaces...) {
		if err := env.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatalf("create namespace %s: %v", ns, err)
		}
	}
	return env
}

// newMigrator connects a Migrator to env with widgetctl's default client limits.
func newMigrator(t testing.TB, env *testenv.Env) *migrate.Migrator {
	t.Helper()
	cfg := *env.Config
	cfg.QPS, cfg.Burst = migrate.DefaultQPS, migrate.DefaultBurst
	m, err := migrate.New(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// logSink collects the migrator's log lines for assertions and echoes them to the test log.
type logSink struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func newLogger(t testing.TB) (logr.Logger, *logSink) {
	s := &logSink{}
	return funcr.New(func(prefix, args string) {
		s.mu.Lock()
		fmt.Fprintln(&s.buf, args)
		s.mu.Unlock()
		t.Log(args)
	}, funcr.Options{}), s
}

func (s *logSink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// views are every Widget of a namespace as read through each served version, keyed by name.
type views struct {
	hub   map[string]v1.Widget
	spoke map[string]v1alpha1.Widget
}

func readViews(t testing.TB, env *testenv.Env, namespace string) views {
	t.Helper()
	ctx := context.Background()
	hubs, spokes := &v1.WidgetList{}, &v1alpha1.WidgetList{}
	if err := env.Client.List(ctx, hubs, client.InNamespace(namespace)); err != nil {
		t.Fatalf("list through v1: %v", err)
	}
	if err := env.Client.List(ctx, spokes, client.InNamespace(namespace)); err != nil {
		t.Fatalf("list through v1alpha1: %v", err)
	}
	v := views{hub: map[string]v1.Widget{}, spoke: map[string]v1alpha1.Widget{}}
	for _, w := range hubs.Items {
		w.ResourceVersion = "" // a re-encoding write moves it, and only it
		v.hub[w.Name] = w
	}
	for _, w := range spokes.Items {
		w.ResourceVersion = ""
		v.spoke[w.Name] = w
	}
	return v
}

// assertSameViews checks that every object reads back unchanged through every version.
func assertSameViews(t testing.TB, before, after views) {
	t.Helper()
	if len(after.hub) != len(before.hub) || len(after.spoke) != len(before.spoke) {
		t.Fatalf("objects: %d through v1 and %d through v1alpha1, want %d and %d", len(after.hub), len(after.spoke), len(before.hub), len(before.spoke))
	}
	bad := 0
	for name, want := range before.hub {
		if d := conversiontest.Diff(want, after.hub[name]); d != "" && bad < 3 {
			bad++
			t.Errorf("%s through v1 changed: %s", name, d)
		}
	}
	for name, want := range before.spoke {
		if d := conversiontest.Diff(want, after.spoke[name]); d != "" && bad < 6 {
			bad++
			t.Errorf("%s through v1alpha1 changed: %s", name, d)
		}
	}
}

// assertStoredIn checks that etcd holds exactly n Widgets in namespace, each encoded in version.
func assertStoredIn(t testing.TB, env *testenv.Env, namespace, version string, n int) {
	t.Helper()
	want := v1.GroupVersion.Group + "/" + version
	got, wrong := 0, []string{}
	for key, apiVersion := range widgetenv.StoredAPIVersions(t, env) {
		if !strings.HasPrefix(key, namespace+"/") {
			continue
		}
		got++
		if apiVersion != want {
			wrong = append(wrong, key+"="+apiVersion)
		}
	}
	if got != n || len(wrong) > 0 {
		t.Fatalf("etcd holds %d Widgets in %s (want %d); %d not in %s, e.g. %v", got, namespace, n, len(wrong), want, wrong[:min(len(wrong), 5)])
	}
}

// setStatusSubresource gives every version of the live Widget CRD the status subresource it
// ships with (on) or none (off, the scale subresource kept). Without one, the migrator
// rewrites through the main resource, which admission sees.
func setStatusSubresource(t testing.TB, env *testenv.Env, on bool) {
	t.Helper()
	shipped := map[string]*apiextensionsv1.CustomResourceSubresources{}
	for _, v := range crd.Widget().Spec.Versions {
		shipped[v.Name] = v.Subresources
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		live := &apiextensionsv1.CustomResourceDefinition{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: crd.WidgetName}, live); err != nil {
			return err
		}
		for i := range live.Spec.Versions {
			v := &live.Spec.Versions[i]
			switch {
			case on:
				v.Subresources = shipped[v.Name].DeepCopy()
			case v.Subresources != nil:
				v.Subresources.Status = nil
			}
		}
		return env.Client.Update(context.Background(), live)
	})
	if err != nil {
		t.Fatalf("set the Widget CRD's status subresource to %v: %v", on, err)
	}
	// The apiserver rebuilds the CRD's handlers from an informer: wait until discovery, which
	// follows the same update, lists widgets/status or no longer does.
	dc, err := discovery.NewDiscoveryClientForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "discovery follows the status subresource", func() error {
		list, err := dc.ServerResourcesForGroupVersion(v1.GroupVersion.String())
		if err != nil {
			return err
		}
		if served := slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == "widgets/status" }); served != on {
			return fmt.Errorf("widgets/status served: %v", served)
		}
		return nil
	})
}

func storedVersions(t testing.TB, env *testenv.Env) []string {
	t.Helper()
	c := &apiextensionsv1.CustomResourceDefinition{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: crd.WidgetName}, c); err != nil {
		t.Fatal(err)
	}
	return c.Status.StoredVersions
}

func progressObject(t testing.TB, env *testenv.Env) migrate.Progress {
	t.Helper()
	cm := &corev1.ConfigMap{}
	key := client.ObjectKey{Namespace: progressNamespace, Name: migrate.ProgressObjectName(crd.WidgetName)}
	if err := env.Client.Get(context.Background(), key, cm); err != nil {
		t.Fatalf("read the progress object: %v", err)
	}
	return migrate.DecodeProgress(cm)
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestMain silences controller-runtime's global logger, which the migrator's client uses:
// left unset, it prints a warning with a stack trace after 30 seconds.
func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	os.Exit(m.Run())
}

// setServed serves a version of the live Widget CRD or stops serving it, and waits until the
// apiserver follows.
func setServed(t testing.TB, env *testenv.Env, version string, served bool) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		live := &apiextensionsv1.CustomResourceDefinition{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: crd.WidgetName}, live); err != nil {
			return err
		}
		crd.Version(live, version).Served = served
		return env.Client.Update(context.Background(), live)
	})
	if err != nil {
		t.Fatalf("set %s served=%v: %v", version, served, err)
	}
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(schema.GroupVersionKind{Group: v1.GroupVersion.Group, Version: version, Kind: "WidgetList"})
	testenv.Eventually(t, 30*time.Second, fmt.Sprintf("the apiserver serves %s: %v", version, served), func() error {
		err := env.Client.List(context.Background(), list, client.Limit(1))
		switch {
		case served && err != nil:
			return err
		case !served && err == nil:
			return fmt.Errorf("%s still served", version)
		}
		return nil
	})
}
