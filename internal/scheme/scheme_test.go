package scheme

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	svmv1 "k8s.io/api/storagemigration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"

	v1 "github.com/widgetry/widget-operator/api/v1"
	"github.com/widgetry/widget-operator/api/v1alpha1"
)

// TestNewKnowsEveryTypeTheProjectUses: the kinds the manager, widgetctl and the migrator
// read or write are all registered.
func TestNewKnowsEveryTypeTheProjectUses(t *testing.T) {
	s := New()
	for _, obj := range []runtime.Object{
		&v1.Widget{}, &v1alpha1.Widget{}, &apiextensionsv1.CustomResourceDefinition{},
		&appsv1.Deployment{}, &corev1.Service{}, &corev1.ConfigMap{}, &coordinationv1.Lease{},
		&svmv1.StorageVersionMigration{},
	} {
		if _, _, err := s.ObjectKinds(obj); err != nil {
			t.Errorf("%T: %v", obj, err)
		}
	}
	if New() == s {
		t.Error("New returned the same scheme twice; callers that add types would share them")
	}
}
