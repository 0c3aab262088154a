// Package scheme builds the runtime.Scheme that every client and manager of this project
// uses: client-go's built-in types (Deployments, Services, ConfigMaps, Leases,
// StorageVersionMigrations, ...), apiextensions/v1 for the CRD, and both Widget versions.
//
// One scheme for all: a smaller one per command saves nothing measurable, and a type
// missing from one of several schemes is a runtime error ("no kind is registered") in the
// one path a test did not take.
package scheme

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	v1 "github.com/widgetry/widget-operator/api/v1"
	"github.com/widgetry/widget-operator/api/v1alpha1"
)

// New returns a new scheme with client-go's types, apiextensions/v1 and Widget v1 and
// v1alpha1. Callers may add to it; each call returns a fresh one.
func New() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(apiextensionsv1.AddToScheme(s))
	utilruntime.Must(v1.AddToScheme(s))
	utilruntime.Must(v1alpha1.AddToScheme(s))
	return s
}
