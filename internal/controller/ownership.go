package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/util/csaupgrade"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/widgetry/widget-operator/api/v1"
)

// childApplyConfiguration is the apply configuration of a Deployment or a Service.
type childApplyConfiguration[T any] interface {
	hasAnnotations[T]
	GetKind() *string
	GetAPIVersion() *string
	WithUID(types.UID) T
	WithResourceVersion(string) T
}

// nameConflictError: an object of a child's name exists and the Widget does not control it.
type nameConflictError struct {
	// obj is the object as read.
	obj client.Object
	// kind is its kind, which a typed object read from the apiserver does not carry.
	kind string
}

func (e *nameConflictError) Error() string {
	controller := "no controller"
	if ref := metav1.GetControllerOf(e.obj); ref != nil {
		controller = fmt.Sprintf("controller %s %s %s", ref.APIVersion, ref.Kind, ref.Name)
	}
	return fmt.Sprintf("%s %s/%s exists and is not controlled by this Widget (%s); it is left untouched: delete it, or recreate the Widget under another name",
		e.kind, e.obj.GetNamespace(), e.obj.GetName(), controller)
}

// writeChild creates the Widget's child desired, or applies it to the child the Widget
// controls, and never writes an object the Widget does not control: a user who may create
// Widgets must not take over (rewrite, then have garbage-collected) a Deployment or Service of
// their namespace by naming a Widget after it. live, an empty object of the child's kind, is
// filled with the child as written; on a name conflict (*nameConflictError) the error holds
// the metadata of the object found. created reports a creation.
func writeChild[T childApplyConfiguration[T]](ctx context.Context, r *WidgetReconciler, w *v1.Widget, desired T, live client.Object) (created bool, err error) {
	kind := *desired.GetKind()
	key := client.ObjectKey{Namespace: w.Namespace, Name: w.Name}
	if desired, err = stampApplied(desired); err != nil {
		return false, err
	}
	// Its metadata is all the decision needs, and all the cache holds (CacheOptions).
	found := childMetadata(*desired.GetAPIVersion(), kind)
	err = r.Client.Get(ctx, key, found)
	if apierrors.IsNotFound(err) || (err == nil && needsUpgrade(found)) {
		// The cache holds labelled objects only, so it cannot see a foreign object; and of
		// managedFields that need an upgrade, it keeps only a marker.
		err = r.APIReader.Get(ctx, key, found)
	}
	switch {
	case apierrors.IsNotFound(err):
		if err := createChild(ctx, r.Client, kind, desired, live); err != nil {
			return true, err
		}
		// At once, from the create's answer: the next reconcile finds nothing to upgrade,
		// and the cache never holds the fields of a child in between.
		if err := upgradeManagedFields(ctx, r.Client, live); err != nil {
			return true, fmt.Errorf("move the fields of the new %s %s/%s to the %s apply: %w", kind, key.Namespace, key.Name, FieldManager, err)
		}
		return true, nil
	case err != nil:
		return false, fmt.Errorf("read %s %s/%s: %w", kind, key.Namespace, key.Name, err)
	case !metav1.IsControlledBy(found, w):
		// An object that lost its owner reference (an orphan deletion) is not adopted either.
		return false, &nameConflictError{obj: found, kind: kind}
	}
	if err := upgradeManagedFields(ctx, r.Client, found); err != nil {
		return false, fmt.Errorf("move the fields of %s %s/%s to the %s apply: %w", kind, key.Namespace, key.Name, FieldManager, err)
	}
	// The whole child, past the cache (which holds its metadata): skipped when it is current,
	// and then read as the apply would have answered.
	if err := r.APIReader.Get(ctx, key, live); err != nil {
		if apierrors.IsNotFound(err) {
			// Deleted since the read: its deletion event reconciles again.
			return false, apierrors.NewConflict(schema.GroupResource{Resource: strings.ToLower(kind) + "s"}, key.Name, err)
		}
		return false, fmt.Errorf("read %s %s/%s: %w", kind, key.Namespace, key.Name, err)
	}
	if ok, err := current(live, desired); err != nil || ok {
		return false, err
	}
	// Applied on condition that the object is still the one read: an apply based on a stale
	// read (say, one from before the garbage collector removed the owner reference for an
	// orphan deletion) conflicts instead of putting the owner reference back, and the
	// reconcile starts over from a fresh read.
	desired.WithUID(found.GetUID()).WithResourceVersion(found.GetResourceVersion())
	if err := r.Client.Apply(ctx, desired, client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
		return false, fmt.Errorf("apply %s %s/%s: %w", kind, key.Namespace, key.Name, err)
	}
	return false, decodeInto(desired, live) // the apply's answer: the object as written
}

// createChild creates desired: a create, unlike an apply, fails on an object that appeared
// since the read, so not even a foreign object created in that instant is written.
func createChild(ctx context.Context, c client.Client, kind string, desired runtime.ApplyConfiguration, live client.Object) error {
	if err := decodeInto(desired, live); err != nil {
		return err
	}
	if err := c.Create(ctx, live, client.FieldOwner(FieldManager)); err != nil {
		return fmt.Errorf("create %s %s/%s: %w", kind, live.GetNamespace(), live.GetName(), err)
	}
	return nil
}

// decodeInto replaces obj, a typed object, with the content of an apply configuration of its
// kind.
func decodeInto(ac runtime.ApplyConfiguration, obj client.Object) error {
	data, err := json.Marshal(ac)
	if err != nil {
		return fmt.Errorf("encode %T: %w", ac, err)
	}
	reflect.ValueOf(obj).Elem().SetZero()
	if err := json.Unmarshal(data, obj); err != nil {
		return fmt.Errorf("decode %T into %T: %w", ac, obj, err)
	}
	return nil
}

// upgradeManagedFields hands the fields the create recorded under the Update operation over to
// the controller's Apply entry (client-go's csaupgrade, kubectl's migration to server-side
// apply). Left under Update, a field the controller stops applying (an endpoint's port, the
// timeout) would stay on the object forever. A no-op for an object already upgraded.
func upgradeManagedFields(ctx context.Context, c client.Client, live client.Object) error {
	patch, err := csaupgrade.UpgradeManagedFieldsPatch(live, sets.New(FieldManager), FieldManager)
	if err != nil || patch == nil {
		return err
	}
	// The patch carries the resourceVersion read, so it conflicts on a stale object too.
	return c.Patch(ctx, live, client.RawPatch(types.JSONPatchType, patch))
}

// reportNameConflicts sets Ready and Progressing False with reason NameConflict: the Widget
// cannot be served while an object it does not control holds its name.
func reportNameConflicts(s *v1.WidgetStatus, w *v1.Widget, conflicts []*nameConflictError) {
	msgs := make([]string, 0, len(conflicts))
	for _, c := range conflicts {
		msgs = append(msgs, c.Error())
	}
	for _, t := range []string{v1.ConditionReady, v1.ConditionProgressing} {
		meta.SetStatusCondition(&s.Conditions, metav1.Condition{Type: t, Status: metav1.ConditionFalse,
			Reason: v1.ReasonNameConflict, Message: truncateMessage(strings.Join(msgs, "; ")), ObservedGeneration: w.Generation})
	}
}
