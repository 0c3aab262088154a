// Package handover moves a release from the single-Deployment layout (one Deployment whose pods
// ran the webhooks and the controller in two containers) to the two planes (a webhook
// Deployment and a controller Deployment) without a moment in which no webhook replica is
// ready.
//
// helm upgrade deletes the old Deployment the moment it creates the new ones, and the new
// webhook Service selects pods by a label the old pods lack: the apiserver's conversion and
// admission calls would find no endpoint until the new replicas are ready. Prepare (a
// pre-upgrade hook) keeps the old Deployment from Helm's deletion (helm.sh/resource-policy:
// keep, which Helm reads from the live object) and labels its pods so that the new Service
// selects them too; Finish (a post-upgrade hook) waits until every replica of the webhook plane
// is a ready endpoint of the Service, then deletes the old Deployment, whose pods drain as on any
// rollout.
package handover

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const (
	// ServingLabel marks the pods the webhook Service selects (the chart's
	// widget-operator.servingLabels).
	ServingLabel = "widgetry.io/serves-webhooks"
	// PendingAnnotation marks an old Deployment Prepare kept for Finish to delete.
	PendingAnnotation = "widgetry.io/handover"
	// keepAnnotation is Helm's: a resource it would delete on upgrade is left alone.
	keepAnnotation = "helm.sh/resource-policy"
	// componentLabel names a pod's part; the single-Deployment layout's was legacyComponent.
	componentLabel  = "app.kubernetes.io/component"
	legacyComponent = "manager"
)

// Release names what a handover touches, all in Namespace.
type Release struct {
	Namespace string
	// Legacy is the single-Deployment layout's Deployment (the release's full name).
	Legacy string
	// Webhook is the webhook plane's Deployment and Service its Service.
	Webhook, Service string
}

// Prepare keeps the old Deployment from Helm's deletion and labels its pods for the new
// Service. Without an old Deployment (a fresh install, or the planes already) it does nothing.
// It may run again (a retried upgrade).
func Prepare(ctx context.Context, c client.Client, r Release, out io.Writer) error {
	dep, err := legacy(ctx, c, r)
	if dep == nil || err != nil {
		if err == nil {
			fmt.Fprintf(out, "no Deployment %s/%s of the single-Deployment layout: nothing to hand over\n", r.Namespace, r.Legacy)
		}
		return err
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"keep",%q:"pending"}}}`, keepAnnotation, PendingAnnotation)
	if err := c.Patch(ctx, dep, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		return fmt.Errorf("keep Deployment %s/%s through the upgrade: %w", r.Namespace, r.Legacy, err)
	}
	pods, err := podsOf(ctx, c, dep)
	if err != nil {
		return err
	}
	labelled := 0
	for i := range pods {
		p := &pods[i]
		if p.Labels[ServingLabel] == "true" || !p.DeletionTimestamp.IsZero() {
			continue
		}
		label := fmt.Sprintf(`{"metadata":{"labels":{%q:"true"}}}`, ServingLabel)
		if err := c.Patch(ctx, p, client.RawPatch(types.MergePatchType, []byte(label))); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("label pod %s/%s for the new webhook Service: %w", p.Namespace, p.Name, err)
		}
		labelled++
	}
	fmt.Fprintf(out, "Deployment %s/%s kept through the upgrade and its %d pods (%d labelled now) selected by the new webhook Service until the webhook plane %s is ready\n",
		r.Namespace, r.Legacy, len(pods), labelled, r.Webhook)
	return nil
}

// Finish waits, at most timeout, until every replica of the webhook plane is a ready endpoint of
// the Service, then deletes the old Deployment Prepare kept. Without one it does nothing.
func Finish(ctx context.Context, c client.Client, r Release, timeout, settle time.Duration, out io.Writer) error {
	dep, err := legacy(ctx, c, r)
	if dep == nil || err != nil {
		if err == nil {
			fmt.Fprintf(out, "no Deployment %s/%s of the single-Deployment layout left: nothing to hand over\n", r.Namespace, r.Legacy)
		}
		return err
	}
	if dep.Annotations[PendingAnnotation] != "pending" {
		return fmt.Errorf("the single-Deployment layout's Deployment %s/%s is still there but was not prepared for the handover (annotation %s): run widgetctl handover prepare, or delete it once the webhook plane %s is ready",
			r.Namespace, r.Legacy, PendingAnnotation, r.Webhook)
	}
	last := "not looked at yet"
	err = wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		missing, err := planeServing(ctx, c, r)
		if err != nil {
			if ctx.Err() != nil {
				return false, ctx.Err() // the deadline, not a failure to read
			}
			return false, err
		}
		last = missing
		return missing == "", nil
	})
	if err != nil {
		return fmt.Errorf("the webhook plane %s/%s did not serve within %s (%s); Deployment %s/%s keeps serving: look at the webhook plane's pods, then run widgetctl handover finish again: %w",
			r.Namespace, r.Webhook, timeout, last, r.Namespace, r.Legacy, err)
	}
	// kube-proxy programs the new endpoints a moment after the EndpointSlice lists them.
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(settle):
	}
	if err := c.Delete(ctx, dep, client.PropagationPolicy(metav1.DeletePropagationBackground),
		client.Preconditions{UID: &dep.UID}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("delete Deployment %s/%s of the single-Deployment layout: %w", r.Namespace, r.Legacy, err)
	}
	fmt.Fprintf(out, "the webhook plane %s serves; Deployment %s/%s of the single-Deployment layout deleted (its pods drain)\n", r.Webhook, r.Namespace, r.Legacy)
	return nil
}

// legacy is the single-Deployment layout's Deployment, or nil.
func legacy(ctx context.Context, c client.Client, r Release) (*appsv1.Deployment, error) {
	dep := &appsv1.Deployment{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: r.Namespace, Name: r.Legacy}, dep); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("read Deployment %s/%s: %w", r.Namespace, r.Legacy, err)
	}
	if dep.Spec.Selector == nil || dep.Spec.Selector.MatchLabels[componentLabel] != legacyComponent {
		return nil, fmt.Errorf("the Deployment %s/%s is not the single-Deployment layout's (its selector has no %s=%s): not touching it",
			r.Namespace, r.Legacy, componentLabel, legacyComponent)
	}
	return dep, nil
}

func podsOf(ctx context.Context, c client.Client, dep *appsv1.Deployment) ([]corev1.Pod, error) {
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.InNamespace(dep.Namespace), client.MatchingLabels(dep.Spec.Selector.MatchLabels)); err != nil {
		return nil, fmt.Errorf("list the pods of Deployment %s/%s: %w", dep.Namespace, dep.Name, err)
	}
	return pods.Items, nil
}

// planeServing says what is missing before the webhook plane serves on its own, or "": the
// Deployment rolled out (every replica updated and ready) and each of its ready pods a ready
// endpoint of the Service.
func planeServing(ctx context.Context, c client.Client, r Release) (string, error) {
	dep := &appsv1.Deployment{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: r.Namespace, Name: r.Webhook}, dep); err != nil {
		if apierrors.IsNotFound(err) {
			return "no Deployment " + r.Webhook, nil
		}
		return "", fmt.Errorf("read Deployment %s/%s: %w", r.Namespace, r.Webhook, err)
	}
	want := int32(1)
	if dep.Spec.Replicas != nil {
		want = *dep.Spec.Replicas
	}
	st := dep.Status
	if st.ObservedGeneration < dep.Generation || st.UpdatedReplicas < want || st.ReadyReplicas < want || want == 0 {
		return fmt.Sprintf("%d of %d replicas updated and ready", min(st.UpdatedReplicas, st.ReadyReplicas), want), nil
	}
	pods, err := podsOf(ctx, c, dep)
	if err != nil {
		return "", err
	}
	slices := &discoveryv1.EndpointSliceList{}
	if err := c.List(ctx, slices, client.InNamespace(r.Namespace), client.MatchingLabels{discoveryv1.LabelServiceName: r.Service}); err != nil {
		return "", fmt.Errorf("list the EndpointSlices of Service %s/%s: %w", r.Namespace, r.Service, err)
	}
	ready := map[string]bool{}
	for _, s := range slices.Items {
		for _, e := range s.Endpoints {
			if e.TargetRef != nil && e.TargetRef.Kind == "Pod" && (e.Conditions.Ready == nil || *e.Conditions.Ready) {
				ready[e.TargetRef.Name] = true
			}
		}
	}
	var missing []string
	serving := 0
	for _, p := range pods {
		if !p.DeletionTimestamp.IsZero() || !podReady(&p) {
			continue
		}
		if ready[p.Name] {
			serving++
		} else {
			missing = append(missing, p.Name)
		}
	}
	if len(missing) > 0 || serving < int(want) {
		return fmt.Sprintf("%d of %d replicas ready endpoints of Service %s (not yet: %s)", serving, want, r.Service, strings.Join(missing, ", ")), nil
	}
	return "", nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
