package conversion

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/widgetry/widget-operator/api/v1"
	"github.com/widgetry/widget-operator/api/v1alpha1"
)

// ConvertWidgetToHub converts a v1alpha1 Widget to the v1 hub. Its signature fits
// controller-runtime's conversion.NewSpokeConverter.
func ConvertWidgetToHub(_ context.Context, src *v1alpha1.Widget, dst *v1.Widget) error {
	data, err := RestoreDataFrom(src.Annotations)
	if err != nil {
		return objectError(src.Namespace, src.Name, err)
	}
	src.ObjectMeta.DeepCopyInto(&dst.ObjectMeta)
	dst.Annotations = WithRestoreData(dst.Annotations, RestoreData{})
	order, set := HubEndpointOrder(src.Spec.Endpoints, data)
	dst.Annotations = withAnnotation(dst.Annotations, EndpointOrderAnnotation, order, set)
	dst.APIVersion, dst.Kind = v1.GroupVersion.String(), kindOf(src.Kind)
	if err := SpecToHub(&src.Spec, data, &dst.Spec); err != nil {
		return objectError(src.Namespace, src.Name, err)
	}
	dst.Status = v1.WidgetStatus{
		AvailableReplicas:  src.Status.AvailableReplicas,
		Conditions:         copyConditions(src.Status.Conditions),
		ObservedGeneration: src.Status.ObservedGeneration,
	}
	return nil
}

// ConvertWidgetFromHub converts the v1 hub to a v1alpha1 Widget. Its signature fits
// controller-runtime's conversion.NewSpokeConverter.
func ConvertWidgetFromHub(_ context.Context, src *v1.Widget, dst *v1alpha1.Widget) error {
	src.ObjectMeta.DeepCopyInto(&dst.ObjectMeta)
	dst.APIVersion, dst.Kind = v1alpha1.GroupVersion.String(), kindOf(src.Kind)
	data, err := SpecFromHub(&src.Spec, &dst.Spec)
	if err != nil {
		return objectError(src.Namespace, src.Name, err)
	}
	order, has := src.Annotations[EndpointOrderAnnotation]
	RestoreEndpointOrder(dst.Spec.Endpoints, order, has, &data)
	dst.Annotations = withAnnotation(dst.Annotations, EndpointOrderAnnotation, "", false)
	dst.Annotations = WithRestoreData(dst.Annotations, data)
	dst.Status = v1alpha1.WidgetStatus{
		AvailableReplicas:  src.Status.AvailableReplicas,
		Conditions:         copyConditions(src.Status.Conditions),
		ObservedGeneration: src.Status.ObservedGeneration,
	}
	return nil
}

// kindOf keeps the source kind (conversion never changes it), defaulting an empty one, as on
// objects built in Go, to Widget.
func kindOf(kind string) string {
	if kind == "" {
		return "Widget"
	}
	return kind
}

// objectError names the object, so one bad Widget in a LIST of thousands can be found.
func objectError(namespace, name string, err error) error {
	return fmt.Errorf("widget %s/%s: %w", namespace, name, err)
}

// copyConditions deep-copies conditions, keeping nil and empty apart.
func copyConditions(in []metav1.Condition) []metav1.Condition {
	if in == nil {
		return nil
	}
	out := make([]metav1.Condition, len(in))
	for i := range in {
		in[i].DeepCopyInto(&out[i])
	}
	return out
}

// withAnnotation returns annotations with key set to value, or removed when !set. The input
// map is not modified; a map left empty becomes nil, as WithRestoreData does.
func withAnnotation(annotations map[string]string, key, value string, set bool) map[string]string {
	if current, had := annotations[key]; had == set && current == value {
		return annotations
	}
	out := make(map[string]string, len(annotations)+1)
	for k, v := range annotations {
		out[k] = v
	}
	if !set {
		delete(out, key)
		if len(out) == 0 {
			return nil
		}
		return out
	}
	out[key] = value
	return out
}
