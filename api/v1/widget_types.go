package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Condition types the controller reports in WidgetStatus.Conditions. Status has the same
// shape in every version, so v1alpha1 Widgets carry the same types and reasons.
const (
	// ConditionReady is True when every desired pod of the Widget is available.
	ConditionReady = "Ready"
	// ConditionProgressing is True while the Widget's Deployment rolls out.
	ConditionProgressing = "Progressing"
	// ConditionPaused is True while the operator's reconciliation is paused for uninstall
	// (the controller's pause marker exists), and absent otherwise. It is not spec.paused,
	// which pauses one Widget's rollouts and shows as Progressing's reason Paused.
	ConditionPaused = "Paused"
)

// Condition reasons the controller reports, CamelCase as metav1.Condition requires. They are
// part of the API: clients and alerts may match on them, so a reason is never renamed.
const (
	// ReasonAvailable: Ready is True; the Deployment has observed its latest spec and at least
	// spec.size replicas are updated and available.
	ReasonAvailable = "Available"
	// ReasonReplicasUnavailable: Ready is False; the Deployment exists but fewer than spec.size
	// replicas are updated and available, or it has not observed its latest spec yet.
	ReasonReplicasUnavailable = "ReplicasUnavailable"
	// ReasonDeploymentMissing: Ready is False; the Widget's Deployment does not exist yet (or
	// the controller's cache has not seen it yet).
	ReasonDeploymentMissing = "DeploymentMissing"
	// ReasonRollingOut: Progressing is True; the Deployment is being created, or is rolling out
	// or scaling to the Widget's spec.
	ReasonRollingOut = "RollingOut"
	// ReasonRolloutComplete: Progressing is False; the Deployment has rolled out the Widget's
	// spec.
	ReasonRolloutComplete = "RolloutComplete"
	// ReasonPaused: Progressing is False; spec.paused is set, so the Deployment does not roll
	// out changes.
	ReasonPaused = "Paused"
	// ReasonReconcileFailed: Ready and Progressing are both False; the last reconcile could
	// not apply the Widget's children. Ready's message is the error, and a Warning event of
	// the same reason is recorded on the Widget.
	ReasonReconcileFailed = "ReconcileFailed"
	// ReasonNameConflict: Ready and Progressing are both False; a Deployment or Service of the
	// Widget's name exists and is not controlled by the Widget, so the controller leaves it
	// untouched. The message names it and its controller; a Warning event of the same reason
	// is recorded on the Widget. It clears once that object is gone.
	ReasonNameConflict = "NameConflict"
	// ReasonControllerPaused: Paused is True; the pause marker ConfigMap exists in the
	// operator's namespace, so no finalizer or child is written. Deleting it resumes.
	ReasonControllerPaused = "ControllerPaused"
)

// EndpointSpec is a port the Widget's pods listen on; its name is the key in WidgetSpec.Endpoints.
// +kubebuilder:validation:XValidation:rule="self.port >= 1 && self.port <= 65535",message="port must be between 1 and 65535"
type EndpointSpec struct {
	// port is the container and Service port.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port,omitempty"`
}

// WidgetSpec is the desired state of a Widget.
type WidgetSpec struct {
	// size is the number of pods. Unset means the default, 1; 0 is a valid value.
	// +optional
	// +default=1
	// +kubebuilder:validation:Minimum=0
	Size *int32 `json:"size,omitempty"`

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

	// timeout is the request timeout as a Go duration ("30s", "1m30s", "1.5s"), positive and
	// at most 24h. v1alpha1 sees it rounded up to whole seconds.
	// +optional
	// +default="30s"
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s') && duration(self) <= duration('24h')",message="timeout must be a positive duration of at most 24h, such as 30s or 1m30s"
	Timeout *string `json:"timeout,omitempty"`

	// endpoints are the named ports, keyed by a DNS-label name. An empty map and no map are
	// different values and both round-trip through v1alpha1.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule="self.all(k, size(k) <= 63 && k.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'))",message="endpoint names must be DNS labels"
	// Each endpoint is a port of the Widget's container and of its Service, where the apiserver
	// refuses a port listed twice: the controller could never apply such a Widget. (A message that
	// names the endpoints is over the apiserver's estimated cost limit for messageExpression.)
	// +kubebuilder:validation:XValidation:rule="self.all(k, self.all(j, j == k || self[j].port != self[k].port))",message="two endpoints list the same port; a Widget container and Service cannot list a port twice"
	Endpoints map[string]EndpointSpec `json:"endpoints,omitzero"` //nolint:kubeapilinter // nomaps: v1's map keyed by name is the reason v1 exists (unique names by construction); v1alpha1 keeps the list

	// paused stops the controller from rolling out changes; the Deployment is paused too.
	// Absent and false both mean not paused; the pointer keeps an explicit false as it was
	// written, so that a manifest saying paused: false reads back as written through every
	// version (v1alpha1 has no such field: the conversion data carries it).
	// +optional
	Paused *bool `json:"paused,omitempty"`
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
// v1 is the hub every other version converts through.
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=wgt
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.size,statuspath=.status.availableReplicas
// +kubebuilder:printcolumn:name="Size",type=integer,JSONPath=`.spec.size`
// +kubebuilder:printcolumn:name="Available",type=integer,JSONPath=`.status.availableReplicas`
// +kubebuilder:printcolumn:name="Image",type=string,JSONPath=`.spec.image`
// +kubebuilder:printcolumn:name="Paused",type=boolean,JSONPath=`.spec.paused`
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
