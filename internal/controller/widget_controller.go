package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	v1 "github.com/widgetry/widget-operator/api/v1"
	"github.com/widgetry/widget-operator/internal/crd"
)

// Name is the controller's name, the `controller` label of controller-runtime's metrics.
const Name = "widget"

// nameConflictRetry is how often a Widget in a name conflict looks again whether the name
// has been freed.
const nameConflictRetry = 10 * time.Second

// WidgetReconciler reconciles Widgets of the CRD's current storage version.
type WidgetReconciler struct {
	Client client.Client
	// APIReader reads without the cache (the CRD at start-up).
	APIReader client.Reader
	Cache     cache.Cache
	Recorder  events.EventRecorder
	// CatalogNamespace holds the catalog entries: the operator's namespace.
	CatalogNamespace string
	// MaxConcurrentReconciles is how many Widgets are reconciled at once (0: one).
	// controller-runtime never reconciles one Widget twice at the same time. A reconcile
	// mostly waits on the apiserver (a read of the Widget and of each child, a write only of
	// what changed): one at a time, a restart at 100,000 Widgets would make its first pass
	// for the better part of an hour, and every change made meanwhile would wait behind it.
	MaxConcurrentReconciles int

	mu         sync.RWMutex
	storage    storageVersion
	controller controller.Controller
	// followMu makes each switch of the storage version happen once (followStorageVersion).
	followMu sync.Mutex
}

// SetupWithManager reads the CRD's storage version, then watches Widgets of that version,
// their Deployments and Services, their catalog entries, and the CRD itself; and registers
// the gauge PausedMetricName.
//
// When the storage version flips, the controller switches its Widget watch inside the
// process (a new informer for the new version, the old one removed) instead of exiting for
// the Deployment to restart it: every replica sees the flip at the same moment, and a
// restart of all of them at once would also take down the webhooks that serve conversion
// during exactly that upgrade step.
func (r *WidgetReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	c := &apiextensionsv1.CustomResourceDefinition{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Name: crd.WidgetName}, c); err != nil {
		return fmt.Errorf("read CRD %s to find its storage version: %w", crd.WidgetName, err)
	}
	version, _ := apihelpers.GetCRDStorageVersion(c) // "" is refused by storageVersionFor
	sv, err := storageVersionFor(version)
	if err != nil {
		return err
	}
	r.storage = sv

	owner := handler.EnqueueRequestForOwner(mgr.GetScheme(), mgr.GetRESTMapper(), &v1.Widget{}, handler.OnlyControllerOwner())
	r.controller, err = ctrl.NewControllerManagedBy(mgr).
		Named(Name).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles}).
		WatchesRawSource(r.widgetSource(sv)).
		Watches(&appsv1.Deployment{}, owner, builder.OnlyMetadata, builder.WithPredicates(childEchoes())).
		Watches(&corev1.Service{}, owner, builder.OnlyMetadata, builder.WithPredicates(childEchoes())).
		Watches(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(catalogEntryToWidget),
			builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
				return o.GetNamespace() == r.CatalogNamespace && o.GetLabels()[CatalogLabel] == "true"
			}), catalogEchoes())).
		Watches(&apiextensionsv1.CustomResourceDefinition{}, handler.Funcs{
			UpdateFunc: func(ctx context.Context, e event.UpdateEvent, _ workqueue.TypedRateLimitingInterface[reconcile.Request]) {
				if err := r.followStorageVersion(ctx, e.ObjectNew.(*apiextensionsv1.CustomResourceDefinition)); err != nil {
					logf.FromContext(ctx).Error(err, "cannot follow the storage version flip; still watching the old version")
				}
			},
		}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetName() == crd.WidgetName }))).
		Build(r)
	if err != nil {
		return err
	}
	// Beside controller-runtime's metrics, served with them by the webhook manager. Every
	// replica runs this setup and its manager's cache, so standbys report the pause too.
	// A controller set up again after a failure replaces the collector of the one before.
	collector := NewPausedCollector(r.paused, mgr.GetLogger().WithName("metrics"))
	if err := crmetrics.Registry.Register(collector); err != nil {
		var already prometheus.AlreadyRegisteredError
		if !errors.As(err, &already) {
			return fmt.Errorf("register %s: %w", PausedMetricName, err)
		}
		crmetrics.Registry.Unregister(already.ExistingCollector)
		if err := crmetrics.Registry.Register(collector); err != nil {
			return fmt.Errorf("register %s: %w", PausedMetricName, err)
		}
	}
	return nil
}

// widgetSource watches Widgets of one version; its events are dropped once another version
// has become the storage version.
func (r *WidgetReconciler) widgetSource(sv storageVersion) source.Source {
	return source.Kind[client.Object](r.Cache, widgetMetadata(sv.name()), &handler.EnqueueRequestForObject{}, r.whileStorage(sv), widgetEchoes())
}

// whileStorage passes the events of sv's watch while sv is the storage version the
// reconciler follows, so that the two watches of a flip never both enqueue.
func (r *WidgetReconciler) whileStorage(sv storageVersion) predicate.Predicate {
	return predicate.NewPredicateFuncs(func(client.Object) bool { return r.currentStorage().name() == sv.name() })
}

func (r *WidgetReconciler) currentStorage() storageVersion {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.storage
}

// followStorageVersion switches the Widget watch when the CRD's storage version changed. The
// new informer lists every Widget, which enqueues them all: their owner references are then
// rewritten to the new version, before the old one can stop being served.
//
// It returns an error, and changes nothing, when the new version is unknown to this binary or
// its watch cannot be started: the old watch keeps delivering events, and the next update
// of the CRD (the informer's periodic resync included) tries again.
func (r *WidgetReconciler) followStorageVersion(ctx context.Context, c *apiextensionsv1.CustomResourceDefinition) error {
	// Reconciles and the CRD's events follow at the same time: one switch, one new watch.
	r.followMu.Lock()
	defer r.followMu.Unlock()
	log := logf.FromContext(ctx)
	version, _ := apihelpers.GetCRDStorageVersion(c)
	old := r.currentStorage()
	if version == "" || version == old.name() {
		return nil
	}
	sv, err := storageVersionFor(version)
	if err != nil {
		return fmt.Errorf("storage version %s -> %s: %w", old.name(), version, err)
	}
	// Switch before the new watch starts, so the events of its initial list are not dropped
	// by its own filter.
	r.setStorage(sv)
	if err := r.controller.Watch(r.widgetSource(sv)); err != nil {
		// Roll back: with the switch kept and no new watch, the old watch's filter would drop
		// every event and nothing would be reconciled until a restart.
		r.setStorage(old)
		return fmt.Errorf("storage version %s -> %s: watch Widgets of %s: %w", old.name(), version, version, err)
	}
	if err := r.Cache.RemoveInformer(ctx, widgetMetadata(old.name())); err != nil {
		log.Error(err, "removing the informer of the old storage version", "version", old.name())
	}
	log.Info("storage version changed: now watching the new storage version", "old", old.name(), "new", version)
	return nil
}

// followCachedCRD follows the storage version of the CRD in the cache (followStorageVersion).
func (r *WidgetReconciler) followCachedCRD(ctx context.Context) error {
	c := &apiextensionsv1.CustomResourceDefinition{}
	if err := r.Cache.Get(ctx, client.ObjectKey{Name: crd.WidgetName}, c); err != nil {
		return fmt.Errorf("read CRD %s from the cache to find its storage version: %w", crd.WidgetName, err)
	}
	return r.followStorageVersion(ctx, c)
}

func (r *WidgetReconciler) setStorage(sv storageVersion) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.storage = sv
}

// catalogEntryToWidget maps a catalog entry back to its Widget, so a deleted or edited
// entry is repaired: by the entry's name, or the data that the cache keeps of an entry whose
// name is a hash (TrimCatalogEntry).
func catalogEntryToWidget(_ context.Context, o client.Object) []reconcile.Request {
	cm, ok := o.(*corev1.ConfigMap)
	if !ok {
		return nil
	}
	namespace, name, ok := parseCatalogEntryName(cm.Name)
	if !ok {
		namespace, name = cm.Data["namespace"], cm.Data["name"]
	}
	if namespace == "" || name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: namespace, Name: name}}}
}

// Reconcile brings one Widget's children, catalog entry and status in line with its spec.
func (r *WidgetReconciler) Reconcile(ctx context.Context, req reconcile.Request) (ctrl.Result, error) {
	paused, err := r.paused(ctx)
	if err != nil {
		// The error alone: controller-runtime ignores a Result returned with an error (and
		// logs a warning), and requeues the request with backoff anyway.
		return ctrl.Result{}, err
	}
	if paused {
		return r.reportPaused(ctx, req)
	}
	// The storage version as the CRD says now, not as it was when this replica was set up:
	// a standby that leads after a flip must not write owner references (or read Widgets)
	// through the old version, which needs the conversion webhook; the garbage collector
	// would then wait on our pods. The CRD comes from the cache, so this costs no request.
	// (Not from the CRD's create event: its handler runs while the controller starts and
	// holds the lock Watch needs, so the switch would wait for a start that waits for it.)
	if err := r.followCachedCRD(ctx); err != nil {
		return ctrl.Result{}, err
	}
	sv := r.currentStorage()
	obj := sv.newObject()
	// Read past the cache: a copy that does not show a deletion yet would have the children
	// written for a Widget that is going away. The writes are safe from any stale read (see
	// writeChild); this read only saves them the conflicts.
	if err := r.APIReader.Get(ctx, req.NamespacedName, obj); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	w, err := sv.toHub(obj)
	if err != nil {
		r.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, "ConversionFailed", "Reconcile", "cannot read the Widget: %v", err)
		return ctrl.Result{}, fmt.Errorf("convert %s to the hub: %w", req, err)
	}
	if !obj.GetDeletionTimestamp().IsZero() {
		return ctrl.Result{}, r.finalize(ctx, obj, w)
	}

	// The finalizer goes on before the catalog entry is written, so no entry can outlive
	// its Widget.
	if !controllerutil.ContainsFinalizer(obj, Finalizer) {
		base := obj.DeepCopyObject().(client.Object)
		controllerutil.AddFinalizer(obj, Finalizer)
		if err := r.Client.Patch(ctx, obj, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
			return ctrl.Result{}, fmt.Errorf("add finalizer %s to %s: %w", Finalizer, req, err)
		}
	}

	dep, conflicts, applyErr := r.applyChildren(ctx, obj, w, sv)
	if apierrors.IsConflict(applyErr) || apierrors.IsAlreadyExists(applyErr) {
		// A child changed or appeared since it was read. Nothing failed: the reconcile starts
		// over from fresh reads (with backoff), and the status stays as it is.
		return ctrl.Result{}, applyErr
	}
	if applyErr != nil {
		r.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, "ReconcileFailed", "Reconcile", "%v", applyErr)
	}
	status := computeStatus(w, sv.status(obj), dep, applyErr)
	if applyErr == nil && len(conflicts) > 0 {
		reportNameConflicts(&status, w, conflicts)
	}
	meta.RemoveStatusCondition(&status.Conditions, v1.ConditionPaused)
	if err := r.writeStatus(ctx, obj, sv, status); err != nil {
		return ctrl.Result{}, errors.Join(applyErr, err)
	}
	if len(conflicts) == 0 {
		return ctrl.Result{}, applyErr
	}
	// After the status write, which conflicts when the Widget changed since it was read: a
	// reconcile that read it just before an orphan deletion finds the orphaned children not
	// controlled, and must not report them.
	for _, c := range conflicts {
		r.Recorder.Eventf(obj, c.obj, corev1.EventTypeWarning, v1.ReasonNameConflict, "Reconcile", "%s", c.Error())
	}
	// The cache cannot see a foreign object, so its deletion sends no event: look again.
	return ctrl.Result{RequeueAfter: nameConflictRetry}, nil
}

// applyChildren server-side applies the catalog entry and writes the Deployment and the
// Service (writeChild). It returns the Deployment as the apiserver answered (nil when the
// Widget has none), and the name conflicts: children not written because an object the
// Widget does not control has their name.
func (r *WidgetReconciler) applyChildren(ctx context.Context, obj client.Object, w *v1.Widget, sv storageVersion) (*appsv1.Deployment, []*nameConflictError, error) {
	ownerAPIVersion := v1.GroupVersion.Group + "/" + sv.name()
	if err := r.applyCatalogEntry(ctx, w); err != nil {
		return nil, nil, err
	}

	var conflicts []*nameConflictError
	var conflict *nameConflictError
	dep := &appsv1.Deployment{}
	created, err := writeChild(ctx, r, w, desiredDeployment(w, ownerAPIVersion), dep)
	switch {
	case errors.As(err, &conflict):
		conflicts, dep = append(conflicts, conflict), nil
	case err != nil:
		return nil, nil, err
	case created:
		r.Recorder.Eventf(obj, nil, corev1.EventTypeNormal, "DeploymentCreated", "Create", "created Deployment %s", w.Name)
	}

	if svc := desiredService(w, ownerAPIVersion); svc != nil {
		if _, err := writeChild(ctx, r, w, svc, &corev1.Service{}); errors.As(err, &conflict) {
			conflicts = append(conflicts, conflict)
		} else if err != nil {
			return nil, nil, err
		}
	} else if err := r.deleteOwnedService(ctx, obj, w); err != nil {
		return nil, nil, err
	}
	return dep, conflicts, nil
}

// applyCatalogEntry server-side applies the Widget's catalog entry unless it is current.
func (r *WidgetReconciler) applyCatalogEntry(ctx context.Context, w *v1.Widget) error {
	key := client.ObjectKey{Namespace: r.CatalogNamespace, Name: CatalogEntryName(w.Namespace, w.Name)}
	desired, err := stampApplied(desiredCatalogEntry(w, r.CatalogNamespace))
	if err != nil {
		return err
	}
	// An entry the cache does not hold is created by the apply (the Widget's first reconcile):
	// no read. One it holds is read past the cache, which keeps of it little more than its name
	// (TrimCatalogEntry).
	live := &corev1.ConfigMap{}
	err = r.Client.Get(ctx, key, live)
	if err == nil {
		err = r.APIReader.Get(ctx, key, live)
	}
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return fmt.Errorf("read catalog entry %s: %w", key, err)
	default:
		if ok, err := current(live, desired); err != nil || ok {
			return err
		}
	}
	if err := r.Client.Apply(ctx, desired, client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("apply catalog entry %s: %w", key, err)
	}
	return nil
}

// deleteOwnedService removes the Service of a Widget that no longer has endpoints.
func (r *WidgetReconciler) deleteOwnedService(ctx context.Context, obj client.Object, w *v1.Widget) error {
	svc := childMetadata("v1", "Service")
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: w.Namespace, Name: w.Name}, svc); err != nil {
		return client.IgnoreNotFound(err)
	}
	if ref := metav1.GetControllerOf(svc); ref == nil || ref.UID != w.UID {
		return nil
	}
	// On condition that it is still the Service read, controlled: not one orphaned since.
	uid, rv := svc.GetUID(), svc.GetResourceVersion()
	if err := r.Client.Delete(ctx, svc, client.Preconditions{UID: &uid, ResourceVersion: &rv}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("delete Service %s/%s of a Widget without endpoints: %w", w.Namespace, w.Name, err)
	}
	r.Recorder.Eventf(obj, nil, corev1.EventTypeNormal, "ServiceDeleted", "Delete", "deleted Service %s: the Widget has no endpoints", w.Name)
	return nil
}

// writeStatus writes status through the status subresource, only when it changed.
func (r *WidgetReconciler) writeStatus(ctx context.Context, obj client.Object, sv storageVersion, status v1.WidgetStatus) error {
	if equality.Semantic.DeepEqual(sv.status(obj), status) {
		return nil
	}
	base := obj.DeepCopyObject().(client.Object)
	sv.setStatus(obj, &status)
	if err := r.Client.Status().Patch(ctx, obj, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("write status of %s/%s: %w", obj.GetNamespace(), obj.GetName(), err)
	}
	return nil
}

// finalize removes the catalog entry, and only once it is gone, the finalizer. Children are
// the garbage collector's: their owner references cascade the deletion.
func (r *WidgetReconciler) finalize(ctx context.Context, obj client.Object, w *v1.Widget) error {
	if !controllerutil.ContainsFinalizer(obj, Finalizer) {
		return nil
	}
	entry := &corev1.ConfigMap{}
	entry.Namespace, entry.Name = r.CatalogNamespace, CatalogEntryName(w.Namespace, w.Name)
	if err := r.Client.Delete(ctx, entry); client.IgnoreNotFound(err) != nil {
		r.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, "CatalogCleanupFailed", "Delete", "deleting catalog entry %s/%s: %v", entry.Namespace, entry.Name, err)
		return fmt.Errorf("delete catalog entry %s/%s: %w", entry.Namespace, entry.Name, err)
	}
	// Confirm with a read that bypasses the cache: the finalizer may only go once the entry
	// is really gone.
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(entry), &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
		if err == nil {
			err = errors.New("still present")
		}
		return fmt.Errorf("catalog entry %s/%s: %w", entry.Namespace, entry.Name, err)
	}
	base := obj.DeepCopyObject().(client.Object)
	controllerutil.RemoveFinalizer(obj, Finalizer)
	if err := r.Client.Patch(ctx, obj, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("remove finalizer %s from %s/%s: %w", Finalizer, w.Namespace, w.Name, err)
	}
	r.Recorder.Eventf(obj, nil, corev1.EventTypeNormal, "CatalogEntryDeleted", "Delete", "removed catalog entry %s/%s", entry.Namespace, entry.Name)
	return nil
}
