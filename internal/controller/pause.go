package controller

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// PausedConfigMap, when it exists in the operator's namespace, stops the controller from
// reconciling Widgets: no finalizer added, no child or catalog entry written. The chart's
// pre-delete hook creates it before removing the finalizers, or the still-running controller
// would add them straight back; it is owned by the manager's Deployment, so it goes with the
// release and a reinstall starts unpaused.
const PausedConfigMap = "widget-operator-paused"

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
