//go:build envtest

package handover_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/widgetry/widget-operator/internal/handover"
	"github.com/widgetry/widget-operator/internal/scheme"
	"github.com/widgetry/widget-operator/internal/testenv"
)

const ns = "widget-system"

var release = handover.Release{Namespace: ns, Legacy: "widget-operator", Webhook: "widget-operator-webhook", Service: "widget-operator-webhook"}

// deployment creates a Deployment selecting component and n pods of it, ready as given, and
// records its rollout as done (there is no kube-controller-manager here).
func deployment(t *testing.T, c client.Client, name, component string, n int, ready bool) []corev1.Pod {
	t.Helper()
	ctx := t.Context()
	labels := map[string]string{"app.kubernetes.io/instance": "widget-operator", "app.kubernetes.io/component": component}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: appsv1.DeploymentSpec{
		Replicas: ptr.To(int32(n)), Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}}}}}
	if err := c.Create(ctx, dep); err != nil {
		t.Fatal(err)
	}
	dep.Status = appsv1.DeploymentStatus{ObservedGeneration: dep.Generation, Replicas: int32(n), UpdatedReplicas: int32(n)}
	if ready {
		dep.Status.ReadyReplicas = int32(n)
	}
	if err := c.Status().Update(ctx, dep); err != nil {
		t.Fatal(err)
	}
	var pods []corev1.Pod
	for i := range n {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-" + string(rune('a'+i)), Labels: labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}}}
		if err := c.Create(ctx, &p); err != nil {
			t.Fatal(err)
		}
		status := corev1.ConditionFalse
		if ready {
			status = corev1.ConditionTrue
		}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}
		if err := c.Status().Update(ctx, &p); err != nil {
			t.Fatal(err)
		}
		pods = append(pods, p)
	}
	return pods
}

// endpoints writes the webhook Service's EndpointSlice listing pods, ready as given.
func endpoints(t *testing.T, c client.Client, ready bool, pods ...corev1.Pod) {
	t.Helper()
	slice := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: release.Service + "-x",
		Labels: map[string]string{discoveryv1.LabelServiceName: release.Service, discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io"}},
		AddressType: discoveryv1.AddressTypeIPv4}
	for i, p := range pods {
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.0.0." + string(rune('1'+i))},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready)}, TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: p.Name}})
	}
	if err := c.Delete(t.Context(), slice); client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}
	if err := c.Create(t.Context(), slice); err != nil {
		t.Fatal(err)
	}
}

// TestHandover walks the handover from the single-Deployment layout on a real apiserver: the
// old Deployment is kept and its pods selected by the new Service, kept while the webhook plane
// is not yet a ready endpoint, and deleted once it is; the misuses are refused and touch
// nothing.
func TestHandover(t *testing.T) {
	env := testenv.Start(t, testenv.Options{Scheme: scheme.New()})
	c := env.Client
	ctx := t.Context()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer

	// Nothing to hand over: a fresh install, or the planes already.
	if err := handover.Prepare(ctx, c, release, &out); err != nil || !strings.Contains(out.String(), "nothing to hand over") {
		t.Fatalf("prepare without an old Deployment: %v, %q", err, out.String())
	}
	if err := handover.Finish(ctx, c, release, time.Second, 0, &out); err != nil {
		t.Fatalf("finish without an old Deployment: %v", err)
	}

	legacyPods := deployment(t, c, release.Legacy, "manager", 2, true)
	// Finish before prepare (hooks run by hand out of order): refused, the Deployment kept.
	if err := handover.Finish(ctx, c, release, time.Second, 0, &out); err == nil || !strings.Contains(err.Error(), "was not prepared") {
		t.Fatalf("finish before prepare: %v", err)
	}

	out.Reset()
	if err := handover.Prepare(ctx, c, release, &out); err != nil {
		t.Fatal(err)
	}
	t.Log(strings.TrimSpace(out.String()))
	legacy := &appsv1.Deployment{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: release.Legacy}, legacy); err != nil {
		t.Fatal(err)
	}
	if legacy.Annotations["helm.sh/resource-policy"] != "keep" || legacy.Annotations[handover.PendingAnnotation] != "pending" {
		t.Errorf("the old Deployment's annotations after prepare: %v", legacy.Annotations)
	}
	for _, p := range legacyPods {
		got := &corev1.Pod{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(&p), got); err != nil {
			t.Fatal(err)
		}
		if got.Labels[handover.ServingLabel] != "true" || got.Labels["app.kubernetes.io/component"] != "manager" {
			t.Errorf("pod %s after prepare: labels %v (want %s=true beside its own)", p.Name, got.Labels, handover.ServingLabel)
		}
	}
	// Again (a retried upgrade): nothing changes, nothing fails.
	if err := handover.Prepare(ctx, c, release, &out); err != nil {
		t.Fatal(err)
	}

	// The webhook plane exists but is not ready: finish waits, then gives up, and the old
	// Deployment keeps serving.
	webhookPods := deployment(t, c, release.Webhook, "webhook", 2, false)
	endpoints(t, c, true, legacyPods...)
	err := handover.Finish(ctx, c, release, 2*time.Second, 0, &out)
	if err == nil || !strings.Contains(err.Error(), "did not serve") || !strings.Contains(err.Error(), "keeps serving") {
		t.Fatalf("finish with the webhook plane not ready: %v", err)
	}
	t.Log(err)
	if err := c.Get(ctx, client.ObjectKeyFromObject(legacy), legacy); err != nil {
		t.Fatalf("the old Deployment after a finish that gave up: %v", err)
	}

	// Ready pods that are not yet endpoints of the Service are not enough either.
	for i := range webhookPods {
		webhookPods[i].Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		if err := c.Status().Update(ctx, &webhookPods[i]); err != nil {
			t.Fatal(err)
		}
	}
	dep := &appsv1.Deployment{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: release.Webhook}, dep); err != nil {
		t.Fatal(err)
	}
	dep.Status.ReadyReplicas = 2
	if err := c.Status().Update(ctx, dep); err != nil {
		t.Fatal(err)
	}
	endpoints(t, c, true, append([]corev1.Pod{webhookPods[0]}, legacyPods...)...)
	err = handover.Finish(ctx, c, release, 2*time.Second, 0, &out)
	if err == nil || !strings.Contains(err.Error(), webhookPods[1].Name) {
		t.Fatalf("finish with one webhook replica not an endpoint: %v (want it named)", err)
	}

	// Every replica a ready endpoint: finish deletes the old Deployment.
	endpoints(t, c, true, append(webhookPods, legacyPods...)...)
	out.Reset()
	finishCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := handover.Finish(finishCtx, c, release, 10*time.Second, 0, &out); err != nil {
		t.Fatal(err)
	}
	t.Log(strings.TrimSpace(out.String()))
	if err := c.Get(ctx, client.ObjectKeyFromObject(legacy), &appsv1.Deployment{}); !apierrors.IsNotFound(err) {
		t.Errorf("the old Deployment after finish: %v (want it gone)", err)
	}

	// A Deployment of that name that is not the single-Deployment layout's is never touched.
	deployment(t, c, release.Legacy, "something-else", 0, true)
	if err := handover.Prepare(ctx, c, release, &out); err == nil || !strings.Contains(err.Error(), "not touching it") {
		t.Fatalf("prepare of a Deployment of another layout: %v", err)
	}
	other := &appsv1.Deployment{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: release.Legacy}, other); err != nil {
		t.Fatal(err)
	}
	if _, kept := other.Annotations["helm.sh/resource-policy"]; kept {
		t.Errorf("prepare annotated a Deployment of another layout: %v", other.Annotations)
	}
}
