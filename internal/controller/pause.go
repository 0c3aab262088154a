package controller

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1 "github.com/widgetry/widget-operator/api/v1"
)

// PausedConfigMap, when it exists in the operator's namespace, stops the controller from
// reconciling Widgets: no finalizer added, no child or catalog entry written. The chart's
// pre-delete hook creates it before removing the finalizers, or the still-running controller
// would add them straight back; it is owned by the manager's Deployment, so it goes with the
// release and a reinstall starts unpaused. The pause shows as the gauge PausedMetricName and
// as the condition Paused on every Widget reconciled meanwhile.
const PausedConfigMap = "widget-operator-paused"

// PausedMetricName is the gauge that shows the pause: 1 while PausedConfigMap exists.
const PausedMetricName = "widget_controller_paused"

// pausedRetry is how often a paused Widget looks again whether the pause was lifted: deleting
// the marker sends no event for the Widget.
const pausedRetry = 30 * time.Second

// paused reports whether reconciliation is paused (through the cache, which holds the
// operator's labelled ConfigMaps).
func (r *WidgetReconciler) paused(ctx context.Context) (bool, error) {
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: r.CatalogNamespace, Name: PausedConfigMap}, &corev1.ConfigMap{})
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsNotFound(err):
		return false, nil
	}
	return false, err
}

// reportPaused shows the pause on the Widget, through status only (the condition Paused): no
// finalizer, child or catalog entry is written while paused. A Widget being deleted is not
// written at all: the uninstall hook is removing its finalizer meanwhile, and status on an
// object on its way out tells no one anything.
func (r *WidgetReconciler) reportPaused(ctx context.Context, req reconcile.Request) (ctrl.Result, error) {
	sv := r.currentStorage()
	obj := sv.newObject()
	if err := r.APIReader.Get(ctx, req.NamespacedName, obj); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if obj.GetDeletionTimestamp().IsZero() {
		status := sv.status(obj)
		meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: v1.ConditionPaused, Status: metav1.ConditionTrue,
			Reason: v1.ReasonControllerPaused, ObservedGeneration: obj.GetGeneration(),
			Message: fmt.Sprintf("the widget-operator does not reconcile Widgets while ConfigMap %s/%s exists (the chart's uninstall hook creates it); delete it to resume",
				r.CatalogNamespace, PausedConfigMap)})
		if err := r.writeStatus(ctx, obj, sv, status); err != nil {
			return ctrl.Result{}, err
		}
	}
	return ctrl.Result{RequeueAfter: pausedRetry}, nil
}

// PauseReconciliation creates the PausedConfigMap in namespace, owned by the manager's
// Deployment (so it is deleted with it). It is idempotent.
func PauseReconciliation(ctx context.Context, c client.Client, namespace, deployment string) error {
	dep := &appsv1.Deployment{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: deployment}, dep); err != nil {
		return fmt.Errorf("read the manager's Deployment %s/%s to own the pause marker: %w", namespace, deployment, err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Namespace: namespace, Name: PausedConfigMap,
		Labels: map[string]string{ManagedByLabel: ManagedByValue},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: dep.Name, UID: dep.UID,
			BlockOwnerDeletion: ptr.To(false)}},
	}, Data: map[string]string{"reason": "uninstalling: the chart's pre-delete hook removes the catalog finalizer from every Widget"}}
	if err := c.Create(ctx, cm); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create %s/%s: %w", namespace, PausedConfigMap, err)
	}
	return nil
}

// ResumeReconciliation deletes the PausedConfigMap in namespace, so the controller reconciles
// again (a Widget it skipped while paused within pausedRetry). It is idempotent: no marker is
// not an error.
func ResumeReconciliation(ctx context.Context, c client.Client, namespace string) error {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: PausedConfigMap}}
	if err := c.Delete(ctx, cm); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("delete %s/%s to resume reconciliation: %w", namespace, PausedConfigMap, err)
	}
	return nil
}

// DeleteCatalog removes every catalog entry in namespace: the controller writes them, so
// they are not part of the Helm release.
func DeleteCatalog(ctx context.Context, c client.Client, namespace string) (int, error) {
	list := &corev1.ConfigMapList{}
	if err := c.List(ctx, list, client.InNamespace(namespace), client.MatchingLabels{CatalogLabel: "true"}); err != nil {
		return 0, fmt.Errorf("list catalog entries in %s: %w", namespace, err)
	}
	for i := range list.Items {
		if err := c.Delete(ctx, &list.Items[i]); client.IgnoreNotFound(err) != nil {
			return i, fmt.Errorf("delete catalog entry %s/%s: %w", namespace, list.Items[i].Name, err)
		}
	}
	return len(list.Items), nil
}

// pausedCollector exports PausedMetricName, read at scrape time like the manager's other
// widget_* gauges (internal/metrics), so every replica reports it, not only the leader that
// reconciles. A read that fails yields no series rather than a wrong 0.
type pausedCollector struct {
	paused func(context.Context) (bool, error)
	log    logr.Logger
}

// NewPausedCollector returns the collector of PausedMetricName; paused reads the marker.
func NewPausedCollector(paused func(context.Context) (bool, error), log logr.Logger) prometheus.Collector {
	return pausedCollector{paused: paused, log: log}
}

const pausedHelp = "1 while the pause marker ConfigMap " + PausedConfigMap + " exists in the operator's namespace and the controller reconciles no Widget, else 0."

var pausedDesc = prometheus.NewDesc(PausedMetricName, pausedHelp, nil, nil)

// Describe implements prometheus.Collector.
func (c pausedCollector) Describe(ch chan<- *prometheus.Desc) { ch <- pausedDesc }

// Collect implements prometheus.Collector.
func (c pausedCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // within Prometheus' 10s scrape timeout
	defer cancel()
	paused, err := c.paused(ctx)
	if err != nil {
		c.log.Error(err, "read the pause marker for metrics; "+PausedMetricName+" is missing from this scrape")
		return
	}
	v := 0.0
	if paused {
		v = 1
	}
	ch <- prometheus.MustNewConstMetric(pausedDesc, prometheus.GaugeValue, v)
}
