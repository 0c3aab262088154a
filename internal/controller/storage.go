package controller

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/widgetry/widget-operator/api/v1"
	"github.com/widgetry/widget-operator/api/v1alpha1"
	"github.com/widgetry/widget-operator/internal/conversion"
)

// storageVersion adapts the Go type of one Widget version to the hub the logic works on.
type storageVersion interface {
	// name is the version, "v1alpha1" or "v1".
	name() string
	// newObject returns an empty Widget of this version.
	newObject() client.Object
	// toHub converts an object of this version to the hub.
	toHub(obj client.Object) (*v1.Widget, error)
	// setStatus copies the hub's status onto an object of this version (status has the same
	// shape in every version).
	setStatus(obj client.Object, status *v1.WidgetStatus)
	// status returns the status of an object of this version, as the hub's type.
	status(obj client.Object) v1.WidgetStatus
}

// storageVersionFor returns the adapter of a Widget version.
func storageVersionFor(version string) (storageVersion, error) {
	switch version {
	case v1.GroupVersion.Version:
		return hubVersion{}, nil
	case v1alpha1.GroupVersion.Version:
		return spokeVersion{}, nil
	}
	return nil, fmt.Errorf("widget version %q is not known to this operator (known: v1alpha1, v1); upgrade the operator before making it the storage version", version)
}

type hubVersion struct{}

func (hubVersion) name() string             { return v1.GroupVersion.Version }
func (hubVersion) newObject() client.Object { return &v1.Widget{} }
func (hubVersion) toHub(obj client.Object) (*v1.Widget, error) {
	return obj.(*v1.Widget).DeepCopy(), nil
}
func (hubVersion) setStatus(obj client.Object, s *v1.WidgetStatus) {
	s.DeepCopyInto(&obj.(*v1.Widget).Status)
}
func (hubVersion) status(obj client.Object) v1.WidgetStatus {
	return *obj.(*v1.Widget).Status.DeepCopy()
}

type spokeVersion struct{}

func (spokeVersion) name() string             { return v1alpha1.GroupVersion.Version }
func (spokeVersion) newObject() client.Object { return &v1alpha1.Widget{} }
func (spokeVersion) toHub(obj client.Object) (*v1.Widget, error) {
	hub := &v1.Widget{}
	if err := conversion.ConvertWidgetToHub(context.Background(), obj.(*v1alpha1.Widget).DeepCopy(), hub); err != nil {
		return nil, err
	}
	return hub, nil
}
func (spokeVersion) setStatus(obj client.Object, s *v1.WidgetStatus) {
	w := obj.(*v1alpha1.Widget)
	in := s.DeepCopy()
	w.Status = v1alpha1.WidgetStatus{AvailableReplicas: in.AvailableReplicas, Conditions: in.Conditions, ObservedGeneration: in.ObservedGeneration}
}
func (spokeVersion) status(obj client.Object) v1.WidgetStatus {
	in := obj.(*v1alpha1.Widget).Status.DeepCopy()
	return v1.WidgetStatus{AvailableReplicas: in.AvailableReplicas, Conditions: in.Conditions, ObservedGeneration: in.ObservedGeneration}
}
