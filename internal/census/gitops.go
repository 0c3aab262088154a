package census

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/widgetry/widget-operator/internal/metalist"
)

// The GitOps APIs whose inventories the census reads, where the cluster serves them.
var (
	ArgoApplications   = schema.GroupVersionKind{Group: "argoproj.io", Version: "v1alpha1", Kind: "ApplicationList"}
	FluxKustomizations = schema.GroupVersionKind{Group: "kustomize.toolkit.fluxcd.io", Version: "v1", Kind: "KustomizationList"}
)

// ErrNotServed: the cluster does not serve that GitOps API, so nothing of it can be listed.
var ErrNotServed = errors.New("not served")

// Argo lists the Argo CD Applications, in every namespace, whose status.resources name an
// object of kind through apiVersion (group/version).
func Argo(ctx context.Context, c client.Reader, apiVersion, kind string) ([]Finding, error) {
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return nil, err
	}
	return inventories(ctx, c, ArgoApplications, SourceArgo, func(app *unstructured.Unstructured) []string {
		resources, _, _ := unstructured.NestedSlice(app.Object, "status", "resources")
		var objects []string
		for _, r := range resources {
			m, _ := r.(map[string]any)
			if str(m, "group") == gv.Group && str(m, "version") == gv.Version && str(m, "kind") == kind {
				objects = append(objects, str(m, "namespace")+"/"+str(m, "name"))
			}
		}
		return objects
	})
}

// Flux lists the Flux Kustomizations, in every namespace, whose status.inventory entries
// (id "<namespace>_<name>_<group>_<kind>", v the version applied) name an object of kind
// through apiVersion.
func Flux(ctx context.Context, c client.Reader, apiVersion, kind string) ([]Finding, error) {
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return nil, err
	}
	return inventories(ctx, c, FluxKustomizations, SourceFlux, func(ks *unstructured.Unstructured) []string {
		entries, _, _ := unstructured.NestedSlice(ks.Object, "status", "inventory", "entries")
		var objects []string
		for _, e := range entries {
			m, _ := e.(map[string]any)
			id := strings.Split(str(m, "id"), "_")
			if len(id) == 4 && id[2] == gv.Group && id[3] == kind && str(m, "v") == gv.Version {
				objects = append(objects, id[0]+"/"+id[1])
			}
		}
		return objects
	})
}

// inventories lists list (a list kind) in every namespace and keeps each object for which
// declared names something. A kind the cluster does not serve is ErrNotServed.
func inventories(ctx context.Context, c client.Reader, list schema.GroupVersionKind, source string, declared func(*unstructured.Unstructured) []string) ([]Finding, error) {
	var out []Finding
	err := metalist.EachObject(ctx, c, list.GroupVersion().String(), list.Kind, func(o *unstructured.Unstructured) error {
		if objects := declared(o); len(objects) > 0 {
			slices.Sort(objects)
			out = append(out, Finding{Source: source, Namespace: o.GetNamespace(), Name: o.GetName(), Objects: objects})
		}
		return nil
	})
	if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%s (%s): %w", source, list.GroupVersion(), ErrNotServed)
	}
	if err != nil {
		return nil, fmt.Errorf("list the %ss in every namespace: %w", source, err)
	}
	return out, nil
}

func str(m map[string]any, k string) string { s, _ := m[k].(string); return s }
