package cli

import (
	"context"
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/widgetry/widget-operator/internal/crd"
)

// Helm's ownership annotation on every object of a release; the CRD carries it too.
const helmReleaseNamespaceAnnotation = "meta.helm.sh/release-namespace"

// namespaceFound is the release namespace: where the operator keeps its records (migration progress, request
// counts, backups, the pause marker) and where its manager reads them: -n when given, else
// the namespace of the release that installed the Widget CRD, else the context's namespace.
// On call runs widgetctl from a laptop whose kubeconfig points anywhere; writing progress to
// that namespace would hide it from the manager (whose alerts then keep firing) and from a
// rerun (which would not resume).
type namespaceFound struct {
	Namespace string `json:"namespace"`
	// Source says how it was found: flag, helm-annotation, conversion-service or context.
	Source string `json:"source"`
}

// findReleaseNamespace finds the release namespace (see namespaceFound); a CRD that cannot be
// read is not an error here (the command reports that itself), the context's namespace is.
func (g *GlobalOptions) findReleaseNamespace(ctx context.Context, c client.Reader) (namespaceFound, error) {
	if ns := g.explicitNamespace(); ns != "" {
		return namespaceFound{ns, "flag"}, nil
	}
	found, err := releaseNamespaceOfCRD(ctx, c)
	if err != nil || found.Namespace != "" {
		return found, err
	}
	return namespaceFound{g.Namespace(), "context"}, nil
}

// releaseNamespaceOfCRD is the release namespace the Widget CRD names (Helm's annotation, else
// its conversion webhook's Service); empty when it names none or does not exist.
func releaseNamespaceOfCRD(ctx context.Context, c client.Reader) (namespaceFound, error) {
	live := &apiextensionsv1.CustomResourceDefinition{}
	err := c.Get(ctx, client.ObjectKey{Name: crd.WidgetName}, live)
	switch {
	case err == nil:
		if ns := live.Annotations[helmReleaseNamespaceAnnotation]; ns != "" {
			return namespaceFound{ns, "helm-annotation"}, nil
		}
		if cv := live.Spec.Conversion; cv != nil && cv.Webhook != nil && cv.Webhook.ClientConfig != nil && cv.Webhook.ClientConfig.Service != nil {
			return namespaceFound{cv.Webhook.ClientConfig.Service.Namespace, "conversion-service"}, nil
		}
	case apierrors.IsNotFound(err):
	default:
		// Forbidden from reading CRDs (a namespaced on-call role) or a blip: -n says it.
		return namespaceFound{}, refused(fmt.Errorf("find the release namespace from CRD %s: %w; pass -n RELEASE_NAMESPACE", crd.WidgetName, err))
	}
	return namespaceFound{}, nil
}

// recordsNamespace is explicit (a --progress-namespace or --records-namespace flag) when
// given, else the release namespace. The records of this run's own requests go there too.
func (g *GlobalOptions) recordsNamespace(ctx context.Context, explicit string) (string, error) {
	if explicit != "" {
		g.records = explicit
		return explicit, nil
	}
	c, err := widgetClient(g)
	if err != nil {
		return "", err
	}
	rn, err := g.findReleaseNamespace(ctx, c)
	if err == nil {
		g.records = rn.Namespace
	}
	return rn.Namespace, err
}
