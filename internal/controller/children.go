package controller

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/utils/ptr"

	v1 "github.com/widgetry/widget-operator/api/v1"
)

// Labels and names shared with the chart, the runbooks and the cache configuration.
const (
	// ManagedByLabel marks every object the controller creates; the manager caches
	// Deployments, Services and ConfigMaps with this label only.
	ManagedByLabel = "app.kubernetes.io/managed-by"
	// ManagedByValue is ManagedByLabel's value.
	ManagedByValue = "widget-operator"
	// WidgetLabel names the owning Widget on its Deployment, Service and pods.
	WidgetLabel = "widgetry.io/widget"
	// CatalogLabel marks catalog entries.
	CatalogLabel = "widgetry.io/catalog"
	// Finalizer guards the catalog entry, which lives in another namespace.
	Finalizer = "widgetry.io/catalog-cleanup"
	// FieldManager owns the fields the controller applies.
	FieldManager = "widget-operator"
	// containerName is the Widget container in its pods.
	containerName = "widget"
)

// childLabels are the labels of a Widget's Deployment, Service and pods.
func childLabels(w *v1.Widget) map[string]string {
	return map[string]string{
		"app.kubernetes.io/name":     "widget",
		"app.kubernetes.io/instance": truncateLabel(w.Name),
		ManagedByLabel:               ManagedByValue,
		WidgetLabel:                  truncateLabel(w.Name),
	}
}

func selectorLabels(w *v1.Widget) map[string]string {
	return map[string]string{"app.kubernetes.io/name": "widget", WidgetLabel: truncateLabel(w.Name)}
}

// truncateLabel fits a Widget name (up to 253 characters) into a label value (63).
func truncateLabel(name string) string {
	if len(name) <= 63 {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return name[:46] + "-" + hex.EncodeToString(sum[:])[:16]
}

// ownerReference points at the Widget through apiVersion, which must be a served version:
// the garbage collector resolves it through discovery and stalls on an unserved one. The
// controller passes the storage version, always served.
func ownerReference(w *v1.Widget, apiVersion string) *metav1ac.OwnerReferenceApplyConfiguration {
	return metav1ac.OwnerReference().
		WithAPIVersion(apiVersion).WithKind("Widget").WithName(w.Name).WithUID(w.UID).
		WithController(true).WithBlockOwnerDeletion(true)
}

// endpointNames returns the endpoint names in a stable order.
func endpointNames(w *v1.Widget) []string {
	names := make([]string, 0, len(w.Spec.Endpoints))
	for n := range w.Spec.Endpoints {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// desiredDeployment is the Widget's Deployment: size replicas of its image, one container
// port per endpoint, paused with the Widget, and Pod Security "restricted".
func desiredDeployment(w *v1.Widget, ownerAPIVersion string) *appsv1ac.DeploymentApplyConfiguration {
	container := corev1ac.Container().
		WithName(containerName).
		WithImage(w.Spec.Image).
		WithImagePullPolicy(corev1.PullIfNotPresent).
		WithSecurityContext(corev1ac.SecurityContext().
			WithAllowPrivilegeEscalation(false).
			WithReadOnlyRootFilesystem(true).
			WithCapabilities(corev1ac.Capabilities().WithDrop("ALL")))
	if w.Spec.Timeout != nil {
		container.WithEnv(corev1ac.EnvVar().WithName("WIDGET_TIMEOUT").WithValue(*w.Spec.Timeout))
	}
	names := endpointNames(w)
	for _, n := range names {
		container.WithPorts(corev1ac.ContainerPort().WithName(portName(n)).WithContainerPort(w.Spec.Endpoints[n].Port).WithProtocol(corev1.ProtocolTCP))
	}
	if len(names) > 0 {
		// The first endpoint (by name) is the one the readiness probe asks; the sample server
		// listens on $PORT.
		first := w.Spec.Endpoints[names[0]].Port
		container.WithEnv(corev1ac.EnvVar().WithName("PORT").WithValue(strconv.Itoa(int(first))))
		container.WithReadinessProbe(corev1ac.Probe().
			WithHTTPGet(corev1ac.HTTPGetAction().WithPath("/readyz").WithPort(intstr.FromInt32(first))).
			WithPeriodSeconds(2).WithFailureThreshold(3))
	}
	replicas := int32(1)
	if w.Spec.Size != nil {
		replicas = *w.Spec.Size
	}
	return appsv1ac.Deployment(w.Name, w.Namespace).
		WithLabels(childLabels(w)).
		WithOwnerReferences(ownerReference(w, ownerAPIVersion)).
		WithSpec(appsv1ac.DeploymentSpec().
			WithReplicas(replicas).
			WithPaused(ptr.Deref(w.Spec.Paused, false)).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(selectorLabels(w))).
			WithTemplate(corev1ac.PodTemplateSpec().
				WithLabels(childLabels(w)).
				WithSpec(corev1ac.PodSpec().
					WithAutomountServiceAccountToken(false).
					WithSecurityContext(corev1ac.PodSecurityContext().
						WithRunAsNonRoot(true).WithRunAsUser(65532).WithRunAsGroup(65532).
						WithSeccompProfile(corev1ac.SeccompProfile().WithType(corev1.SeccompProfileTypeRuntimeDefault))).
					WithContainers(container))))
}

// desiredService is the Widget's Service, one port per endpoint. A Widget without endpoints
// has no Service: a ClusterIP Service needs at least one port.
func desiredService(w *v1.Widget, ownerAPIVersion string) *corev1ac.ServiceApplyConfiguration {
	if len(w.Spec.Endpoints) == 0 {
		return nil
	}
	spec := corev1ac.ServiceSpec().WithSelector(selectorLabels(w))
	for _, n := range endpointNames(w) {
		p := w.Spec.Endpoints[n].Port
		spec.WithPorts(corev1ac.ServicePort().WithName(portName(n)).WithPort(p).WithTargetPort(intstr.FromInt32(p)).WithProtocol(corev1.ProtocolTCP))
	}
	return corev1ac.Service(w.Name, w.Namespace).
		WithLabels(childLabels(w)).
		WithOwnerReferences(ownerReference(w, ownerAPIVersion)).
		WithSpec(spec)
}

// portName fits an endpoint name (a DNS label, up to 63 characters) into a port name (an
// IANA service name, up to 15).
func portName(name string) string {
	if len(name) <= 15 {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return name[:8] + "-" + hex.EncodeToString(sum[:])[:6]
}

// CatalogEntryName names the catalog ConfigMap of a Widget: one small object per Widget, so
// 10,000 Widgets never approach the 1 MiB object limit.
func CatalogEntryName(namespace, name string) string {
	n := fmt.Sprintf("widget.%s.%s", namespace, name)
	if len(n) <= 253 {
		return n
	}
	sum := sha256.Sum256([]byte(namespace + "/" + name))
	return "widget." + hex.EncodeToString(sum[:])
}

// parseCatalogEntryName returns the namespace and name of the Widget whose catalog entry is
// named entry, when the name spells them out (CatalogEntryName's "widget.<namespace>.<name>":
// a namespace has no dots); not for a hashed name or another object's.
func parseCatalogEntryName(entry string) (namespace, name string, ok bool) {
	rest, ok := strings.CutPrefix(entry, "widget.")
	if !ok {
		return "", "", false
	}
	namespace, name, ok = strings.Cut(rest, ".")
	if !ok || namespace == "" || name == "" || CatalogEntryName(namespace, name) != entry {
		return "", "", false
	}
	return namespace, name, true
}

// desiredCatalogEntry records the Widget in the operator's namespace.
func desiredCatalogEntry(w *v1.Widget, catalogNamespace string) *corev1ac.ConfigMapApplyConfiguration {
	data := map[string]string{
		"namespace": w.Namespace,
		"name":      w.Name,
		"uid":       string(w.UID),
		"image":     w.Spec.Image,
	}
	if w.Spec.Size != nil {
		data["size"] = strconv.Itoa(int(*w.Spec.Size))
	}
	return corev1ac.ConfigMap(CatalogEntryName(w.Namespace, w.Name), catalogNamespace).
		WithLabels(map[string]string{ManagedByLabel: ManagedByValue, CatalogLabel: "true"}).
		WithData(data)
}
