package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Endpoint is a named port the Widget's pods listen on.
// +kubebuilder:validation:XValidation:rule="self.port >= 1 && self.port <= 65535",message="port must be between 1 and 65535"
type Endpoint struct {
	// name is a DNS label, unique within the Widget.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name,omitempty"`

	// port is the container and Service port.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port,omitempty"`
}

// WidgetSpec is the desired state of a Widget.
type WidgetSpec struct {
	// replicas is the number of pods. Unset means the default, 1; 0 is a valid value.
	// +optional
	// +default=1
	// +kubebuilder:validation:Minimum=0
	Replicas *int32 `json:"replicas,omitempty"`

	// image is the container image the pods run.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self.trim() != ''",message="image must not be empty"
	// The reference grammar the kubelet parses with (github.com/distribution/reference,
	// ParseNormalizedNamed, and the digests go-digest accepts), so that the apiserver refuses a
	// reference the kubelet could never pull without calling our webhook.
	// +kubebuilder:validation:XValidation:rule="self.trim() == '' || (self.matches('^(?:(?:(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])(?:[.](?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))*|[[][a-fA-F0-9:]+[]])(?::[0-9]+)?/)?[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*)*(?::[a-zA-Z0-9_][a-zA-Z0-9_.-]{0,127})?(?:@(?:sha256:[a-f0-9]{64}|sha384:[a-f0-9]{96}|sha512:[a-f0-9]{128}))?$') && !self.matches('^[a-f0-9]{64}$'))",message="image must be a container image reference such as registry.example.com/team/server:v1.2.3 (a lowercase repository path, an optional :tag, an optional @sha256: digest); the kubelet would refuse to pull it"
	Image string `json:"image,omitempty"`

	// timeoutSeconds is the request timeout in whole seconds (v1 holds it as a duration).
	// +optional
	// +default=30
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=86400
	TimeoutSeconds *int32 `json:"timeoutSeconds,omitempty"`

	// endpoints are the named ports, unique by name. An empty list and no list are different
	// values and both round-trip through v1.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	// Each endpoint is a port of the Widget's container and of its Service, where the apiserver
	// refuses a port listed twice: the controller could never apply such a Widget. (A message that
	// names the endpoints is over the apiserver's estimated cost limit for messageExpression.)
	// +kubebuilder:validation:XValidation:rule="self.all(e, self.filter(f, f.port == e.port).size() == 1)",message="two endpoints list the same port; a Widget container and Service cannot list a port twice"
	Endpoints []Endpoint `json:"endpoints,omitzero"` //nolint:kubeapilinter // optionalfields: omitzero, not omitempty, keeps an empty list apart from no list (both round-trip through v1)
}

// WidgetStatus is the observed state of a Widget. It has the same shape in every version.
type WidgetStatus struct {
	// conditions are Ready and Progressing.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// availableReplicas is the number of available pods of the Widget's Deployment.
	// +optional
	AvailableReplicas int32 `json:"availableReplicas,omitempty"` //nolint:kubeapilinter // optionalfields: absent and 0 both mean no pod is available; a pointer would add a state with no meaning

	// observedGeneration is the metadata.generation the status was computed for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"` //nolint:kubeapilinter // optionalfields: generations start at 1, so absent and 0 both mean never observed
}

// Widget is a replicated HTTP service: the controller runs it as a Deployment and a Service.
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=wgt
// +kubebuilder:storageversion
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.availableReplicas
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.spec.replicas`
// +kubebuilder:printcolumn:name="Available",type=integer,JSONPath=`.status.availableReplicas`
// +kubebuilder:printcolumn:name="Image",type=string,JSONPath=`.spec.image`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Widget struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state of the Widget.
	// +required
	Spec WidgetSpec `json:"spec"` //nolint:kubeapilinter // requiredfields: the kubebuilder shape; a Widget's spec always holds the required image, so its zero value is never sent

	// status is the state the controller observed.
	// +optional
	Status WidgetStatus `json:"status,omitempty"` //nolint:kubeapilinter // optionalfields: the controller owns status through its subresource; a pointer would only add nil checks
}

// WidgetList is a list of Widgets.
// +kubebuilder:object:root=true
type WidgetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Widget `json:"items"`
}
