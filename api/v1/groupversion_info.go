// Package v1 holds the v1 (hub) version of the widgetry.io Widget API. Every other version
// converts to and from this one; the controller works on it. Conversion functions live in
// internal/conversion, so this package imports no controller-runtime.
//
// +kubebuilder:object:generate=true
// +groupName=widgetry.io
package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of this package's types.
	GroupVersion = schema.GroupVersion{Group: "widgetry.io", Version: "v1"}

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
