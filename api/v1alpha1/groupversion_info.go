// Package v1alpha1 holds the v1alpha1 (spoke) version of the widgetry.io Widget API: the
// installed base that the staged upgrade moves away from. Conversion to and from the v1 hub
// lives in internal/conversion, so this package imports no controller-runtime.
//
// +kubebuilder:object:generate=true
// +groupName=widgetry.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of this package's types.
	GroupVersion = schema.GroupVersion{Group: "widgetry.io", Version: "v1alpha1"}

	// SchemeBuilder registers this package's types with a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds this package's types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(GroupVersion, &Widget{}, &WidgetList{})
	metav1.AddToGroupVersion(scheme, GroupVersion)
	return nil
}
