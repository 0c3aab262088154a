package gatestate

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Annotation carries the reason of a write that is not the chart's own: the same annotation
// the stage guard reads on the CRD, so one word means "a human overrode a guard, and why".
const Annotation = "widgetry.io/break-glass"

// OverrideGroup, OverrideResource and OverrideVerb name the permission the guard asks the
// authorizer for before it takes a reason: no such resource exists, so only a wildcard grant
// (cluster-admin) or a Role written for it holds it, and a namespace editor does not.
const (
	OverrideGroup    = "widgetry.io"
	OverrideResource = "gatestates"
	OverrideVerb     = "override"
)

// RecordingReason wraps c so that every ConfigMap and Secret it creates, updates or patches
// carries reason in Annotation. Other kinds pass untouched: a Widget rewritten by a migration
// must stay exactly as it was. An empty reason returns c.
func RecordingReason(c client.Client, reason string) client.Client {
	if reason == "" {
		return c
	}
	return &recording{Client: c, reason: reason}
}

type recording struct {
	client.Client
	reason string
}

func (r *recording) stamp(obj client.Object) {
	switch obj.(type) {
	case *corev1.ConfigMap, *corev1.Secret:
	default:
		return
	}
	a := obj.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a[Annotation] = r.reason
	obj.SetAnnotations(a)
}

func (r *recording) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	r.stamp(obj)
	return r.Client.Create(ctx, obj, opts...)
}

func (r *recording) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	r.stamp(obj)
	return r.Client.Update(ctx, obj, opts...)
}

// Patch stamps obj before the patch is computed from it: a merge patch against the object as
// read then carries the annotation too.
func (r *recording) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	r.stamp(obj)
	return r.Client.Patch(ctx, obj, patch, opts...)
}
