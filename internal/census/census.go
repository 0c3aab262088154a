package census

import (
	"context"
	"errors"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Result is a census of every source.
type Result struct {
	Found []Finding `json:"found"`
	// Unread are the sources the caller may not read, each with the permission it lacks: what
	// they hold is unknown.
	Unread []string `json:"unread,omitempty"`
	// NotServed are the GitOps APIs the cluster does not serve (nothing of them to read).
	NotServed []string `json:"notServed,omitempty"`
}

// Run takes the census of kind through apiVersion: every Helm release revision (cs), every
// Argo CD Application and Flux Kustomization where those APIs are served (c). A source the
// caller may not read is listed in Unread, not an error.
func Run(ctx context.Context, cs kubernetes.Interface, c client.Reader, apiVersion, kind string) (*Result, error) {
	r := &Result{Found: []Finding{}}
	helm, err := HelmReleases(cs, apiVersion, kind)
	switch {
	case apierrors.IsForbidden(err):
		r.Unread = append(r.Unread, "Helm releases (list Secrets and ConfigMaps in every namespace)")
	case err != nil:
		return nil, err
	}
	r.Found = append(r.Found, helm...)
	for _, src := range []struct {
		name, needs string
		read        func(context.Context, client.Reader, string, string) ([]Finding, error)
	}{
		{SourceArgo, "list applications.argoproj.io in every namespace", Argo},
		{SourceFlux, "list kustomizations.kustomize.toolkit.fluxcd.io in every namespace", Flux},
	} {
		found, err := src.read(ctx, c, apiVersion, kind)
		switch {
		case errors.Is(err, ErrNotServed):
			r.NotServed = append(r.NotServed, src.name+"s")
		case apierrors.IsForbidden(err):
			r.Unread = append(r.Unread, src.name+"s ("+src.needs+")")
		case err != nil:
			return nil, err
		}
		r.Found = append(r.Found, found...)
	}
	return r, nil
}
