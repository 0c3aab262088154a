package manager

import (
	"context"
	"fmt"
	"slices"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// controllerPermissions are what the Widget controller needs, as the chart's ClusterRole
// and Role grant them. Without them it would start and then wait two minutes for caches that
// never sync, logging only the informers' list errors; asked first, it says what is missing.
var controllerPermissions = []authorizationv1.ResourceAttributes{
	{Group: "widgetry.io", Resource: "widgets", Verb: "list"},
	{Group: "widgetry.io", Resource: "widgets", Verb: "watch"},
	{Group: "widgetry.io", Resource: "widgets", Verb: "update"},
	{Group: "widgetry.io", Resource: "widgets", Subresource: "status", Verb: "update"},
	{Group: "widgetry.io", Resource: "widgets", Subresource: "finalizers", Verb: "update"},
	{Group: "apps", Resource: "deployments", Verb: "list"},
	{Group: "apps", Resource: "deployments", Verb: "create"},
	{Group: "", Resource: "services", Verb: "list"},
	{Group: "", Resource: "services", Verb: "create"},
}

// namespacedControllerPermissions are needed in the manager's own namespace.
var namespacedControllerPermissions = []authorizationv1.ResourceAttributes{
	{Group: "", Resource: "configmaps", Verb: "list"},
	{Group: "", Resource: "configmaps", Verb: "create"},
	{Group: "coordination.k8s.io", Resource: "leases", Verb: "update"},
}

// checkControllerRBAC asks the apiserver (SelfSubjectAccessReview, which every authenticated
// identity may create) whether this identity holds the controller's permissions, and names
// every one it lacks.
func checkControllerRBAC(ctx context.Context, cfg *rest.Config, namespace string, extra []authorizationv1.ResourceAttributes) error {
	cs, err := kubernetes.NewForConfig(rest.AddUserAgent(rest.CopyConfig(cfg), "rbac-check"))
	if err != nil {
		return err
	}
	var missing []string
	check := func(attrs authorizationv1.ResourceAttributes) error {
		review, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &attrs}}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("check RBAC: %w", err)
		}
		if !review.Status.Allowed {
			what := attrs.Resource
			if attrs.Group != "" {
				what += "." + attrs.Group
			}
			if attrs.Subresource != "" {
				what += "/" + attrs.Subresource
			}
			if attrs.Name != "" {
				what += " " + attrs.Name
			}
			where := "cluster-wide"
			if attrs.Namespace != "" {
				where = "in namespace " + attrs.Namespace
			}
			missing = append(missing, fmt.Sprintf("%s %s %s", attrs.Verb, what, where))
		}
		return nil
	}
	for _, attrs := range controllerPermissions {
		if err := check(attrs); err != nil {
			return err
		}
	}
	for _, attrs := range slices.Concat(namespacedControllerPermissions, extra) {
		attrs.Namespace = namespace
		if err := check(attrs); err != nil {
			return err
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("RBAC: this manager's identity may not %s; restore the chart's ClusterRole and Role (helm upgrade of the release)", strings.Join(missing, ", "))
	}
	return nil
}
