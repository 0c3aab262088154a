package controller

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1 "github.com/widgetry/widget-operator/api/v1"
	"github.com/widgetry/widget-operator/internal/scheme"
)

const operatorNamespace = "widget-system"

func pauseMarker() *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: PausedConfigMap}}
}

// pausedReconciler is a reconciler on a fake apiserver holding objs, the storage version v1.
func pausedReconciler(funcs interceptor.Funcs, objs ...client.Object) (*WidgetReconciler, client.Client) {
	c := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(objs...).
		WithStatusSubresource(&v1.Widget{}).WithInterceptorFuncs(funcs).Build()
	return &WidgetReconciler{Client: c, APIReader: c, CatalogNamespace: operatorNamespace, storage: hubVersion{}}, c
}

func TestPausedGauge(t *testing.T) {
	readFails := interceptor.Funcs{Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
		return errors.New("cache not started")
	}}
	tests := []struct {
		name  string
		funcs interceptor.Funcs
		objs  []client.Object
		want  string // "" for no series
	}{
		{name: "marker present", objs: []client.Object{pauseMarker()}, want: "widget_controller_paused 1"},
		{name: "marker absent", want: "widget_controller_paused 0"},
		{name: "marker in another namespace", objs: []client.Object{&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: PausedConfigMap}}},
			want: "widget_controller_paused 0"},
		{name: "read fails: no series rather than a wrong 0", funcs: readFails},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, _ := pausedReconciler(tt.funcs, tt.objs...)
			collector := pausedCollector{paused: r.paused, log: logr.Discard()}
			if tt.want == "" {
				if n := testutil.CollectAndCount(collector); n != 0 {
					t.Fatalf("%d series, want none", n)
				}
				return
			}
			want := "# HELP " + PausedMetricName + " " + pausedHelp + "\n# TYPE " + PausedMetricName + " gauge\n" + tt.want + "\n"
			if err := testutil.CollectAndCompare(collector, strings.NewReader(want)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestReconcileWhilePaused: while paused a Widget gets the condition Paused and nothing else;
// one being deleted is not written at all.
func TestReconcileWhilePaused(t *testing.T) {
	widget := &v1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "shop", Generation: 2},
		Spec: v1.WidgetSpec{Image: "srv:1", Endpoints: map[string]v1.EndpointSpec{"http": {Port: 8080}}}}
	deleting := &v1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "going", Finalizers: []string{Finalizer},
		DeletionTimestamp: &metav1.Time{Time: time.Now()}}, Spec: v1.WidgetSpec{Image: "srv:1"}}
	r, c := pausedReconciler(interceptor.Funcs{}, pauseMarker(), widget, deleting)
	ctx := context.Background()

	for _, w := range []*v1.Widget{widget, deleting} {
		before := &v1.Widget{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(w), before); err != nil {
			t.Fatal(err)
		}
		res, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(w)})
		if err != nil || res.RequeueAfter != pausedRetry {
			t.Fatalf("Reconcile %s: %+v, %v; want a requeue after %s", w.Name, res, err, pausedRetry)
		}
		got := &v1.Widget{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(w), got); err != nil {
			t.Fatal(err)
		}
		if err := c.Get(ctx, client.ObjectKeyFromObject(w), &appsv1.Deployment{}); !apierrors.IsNotFound(err) {
			t.Errorf("%s: Deployment read %v, want none written", w.Name, err)
		}
		if w == deleting {
			if got.ResourceVersion != before.ResourceVersion {
				t.Errorf("the Widget being deleted was written: %+v", got)
			}
			continue
		}
		if len(got.Finalizers) != 0 {
			t.Errorf("finalizers %v written while paused", got.Finalizers)
		}
		cond := meta.FindStatusCondition(got.Status.Conditions, v1.ConditionPaused)
		wantMessage := "ConfigMap " + operatorNamespace + "/" + PausedConfigMap + " exists"
		if cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != v1.ReasonControllerPaused || cond.ObservedGeneration != 2 ||
			!strings.Contains(cond.Message, wantMessage) || !strings.Contains(cond.Message, "delete it to resume") {
			t.Errorf("condition Paused %+v, want True %s, generation 2, naming %s", cond, v1.ReasonControllerPaused, wantMessage)
		}
	}
}

func TestResumeReconciliation(t *testing.T) {
	r, c := pausedReconciler(interceptor.Funcs{}, pauseMarker())
	ctx := context.Background()
	for i := range 2 { // idempotent: the second finds no marker
		if err := ResumeReconciliation(ctx, c, operatorNamespace); err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
		if paused, err := r.paused(ctx); err != nil || paused {
			t.Fatalf("call %d: paused %v, %v", i+1, paused, err)
		}
	}
	failing, _ := pausedReconciler(interceptor.Funcs{Delete: func(context.Context, client.WithWatch, client.Object, ...client.DeleteOption) error {
		return errors.New("forbidden")
	}}, pauseMarker())
	if err := ResumeReconciliation(ctx, failing.Client, operatorNamespace); err == nil || !strings.Contains(err.Error(), PausedConfigMap) {
		t.Fatalf("a failed delete: %v, want an error naming %s", err, PausedConfigMap)
	}
}
