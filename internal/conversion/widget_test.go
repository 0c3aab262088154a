package conversion_test

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1 "github.com/widgetry/widget-operator/api/v1"
	"github.com/widgetry/widget-operator/api/v1alpha1"
	"github.com/widgetry/widget-operator/internal/conversion"
	"github.com/widgetry/widget-operator/internal/conversion/conversiontest"
)

func spoke(spec v1alpha1.WidgetSpec, annotations map[string]string) *v1alpha1.Widget {
	return &v1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "w", Annotations: annotations}, Spec: spec}
}

func hub(spec v1.WidgetSpec, annotations map[string]string) *v1.Widget {
	return &v1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "w", Annotations: annotations}, Spec: spec}
}

func data(d conversion.RestoreData) map[string]string {
	return map[string]string{conversion.DataAnnotation: d.Marshal()}
}

// TestToHub covers the hazards on the way to v1 (the rules are in the package documentation):
// unset versus zero, empty versus unset lists, the timeout bounds, stale annotations written
// before a v1alpha1 edit.
func TestToHub(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   *v1alpha1.Widget
		want *v1.Widget
	}{
		{"unset stays unset", spoke(v1alpha1.WidgetSpec{Image: "i"}, nil), hub(v1.WidgetSpec{Image: "i"}, nil)},
		{"explicit zero replicas stays zero", spoke(v1alpha1.WidgetSpec{Image: "i", Replicas: ptr.To[int32](0)}, nil), hub(v1.WidgetSpec{Image: "i", Size: ptr.To[int32](0)}, nil)},
		{"empty endpoint list becomes an empty map", spoke(v1alpha1.WidgetSpec{Image: "i", Endpoints: []v1alpha1.Endpoint{}}, nil), hub(v1.WidgetSpec{Image: "i", Endpoints: map[string]v1.EndpointSpec{}}, nil)},
		{"endpoints keyed by name, their order kept", spoke(v1alpha1.WidgetSpec{Image: "i", Endpoints: []v1alpha1.Endpoint{{Name: "web", Port: 80}, {Name: "admin", Port: 65535}}}, nil),
			hub(v1.WidgetSpec{Image: "i", Endpoints: map[string]v1.EndpointSpec{"web": {Port: 80}, "admin": {Port: 65535}}}, map[string]string{conversion.EndpointOrderAnnotation: "web,admin"})},
		{"sorted endpoints need no order", spoke(v1alpha1.WidgetSpec{Image: "i", Endpoints: []v1alpha1.Endpoint{{Name: "admin", Port: 1}, {Name: "web", Port: 80}}}, nil),
			hub(v1.WidgetSpec{Image: "i", Endpoints: map[string]v1.EndpointSpec{"web": {Port: 80}, "admin": {Port: 1}}}, nil)},
		{"a kept order comes back verbatim while the list follows it", spoke(v1alpha1.WidgetSpec{Image: "i", Endpoints: []v1alpha1.Endpoint{{Name: "web", Port: 80}, {Name: "admin", Port: 1}}},
			data(conversion.RestoreData{EndpointOrder: ptr.To("web,gone,admin")})),
			hub(v1.WidgetSpec{Image: "i", Endpoints: map[string]v1.EndpointSpec{"web": {Port: 80}, "admin": {Port: 1}}}, map[string]string{conversion.EndpointOrderAnnotation: "web,gone,admin"})},
		{"a v1alpha1 reorder wins over a kept order", spoke(v1alpha1.WidgetSpec{Image: "i", Endpoints: []v1alpha1.Endpoint{{Name: "web", Port: 80}, {Name: "grpc", Port: 2}, {Name: "admin", Port: 1}}},
			data(conversion.RestoreData{EndpointOrder: ptr.To("web,gone,admin")})),
			hub(v1.WidgetSpec{Image: "i", Endpoints: map[string]v1.EndpointSpec{"web": {Port: 80}, "admin": {Port: 1}, "grpc": {Port: 2}}}, map[string]string{conversion.EndpointOrderAnnotation: "web,grpc,admin"})},
		{"minimum timeout", spoke(v1alpha1.WidgetSpec{Image: "i", TimeoutSeconds: ptr.To[int32](1)}, nil), hub(v1.WidgetSpec{Image: "i", Timeout: ptr.To("1s")}, nil)},
		{"maximum timeout", spoke(v1alpha1.WidgetSpec{Image: "i", TimeoutSeconds: ptr.To[int32](86400)}, nil), hub(v1.WidgetSpec{Image: "i", Timeout: ptr.To("24h0m0s")}, nil)},
		{"90 seconds in Go's canonical form", spoke(v1alpha1.WidgetSpec{Image: "i", TimeoutSeconds: ptr.To[int32](90)}, nil), hub(v1.WidgetSpec{Image: "i", Timeout: ptr.To("1m30s")}, nil)},
		{"fractional timeout restored from the annotation", spoke(v1alpha1.WidgetSpec{Image: "i", TimeoutSeconds: ptr.To[int32](2)}, data(conversion.RestoreData{Timeout: ptr.To("1.5s")})),
			hub(v1.WidgetSpec{Image: "i", Timeout: ptr.To("1.5s")}, nil)},
		{"a v1alpha1 edit wins over a stale annotation", spoke(v1alpha1.WidgetSpec{Image: "i", TimeoutSeconds: ptr.To[int32](5)}, data(conversion.RestoreData{Timeout: ptr.To("1.5s")})),
			hub(v1.WidgetSpec{Image: "i", Timeout: ptr.To("5s")}, nil)},
		{"a removed timeout stays removed", spoke(v1alpha1.WidgetSpec{Image: "i"}, data(conversion.RestoreData{Timeout: ptr.To("1.5s")})), hub(v1.WidgetSpec{Image: "i"}, nil)},
		{"paused restored, other annotations kept", spoke(v1alpha1.WidgetSpec{Image: "i"}, map[string]string{"a": "b", conversion.DataAnnotation: `{"paused":true}`}),
			hub(v1.WidgetSpec{Image: "i", Paused: ptr.To(true)}, map[string]string{"a": "b"})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := &v1.Widget{}
			if err := conversion.ConvertWidgetToHub(context.Background(), tc.in, got); err != nil {
				t.Fatal(err)
			}
			tc.want.TypeMeta = metav1.TypeMeta{APIVersion: "widgetry.io/v1", Kind: "Widget"}
			if d := conversiontest.Diff(tc.want, got); d != "" {
				t.Error(d)
			}
		})
	}
}

func TestFromHub(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   *v1.Widget
		want *v1alpha1.Widget
	}{
		{"unset stays unset", hub(v1.WidgetSpec{Image: "i"}, nil), spoke(v1alpha1.WidgetSpec{Image: "i"}, nil)},
		{"explicit zero size stays zero", hub(v1.WidgetSpec{Image: "i", Size: ptr.To[int32](0)}, nil), spoke(v1alpha1.WidgetSpec{Image: "i", Replicas: ptr.To[int32](0)}, nil)},
		{"empty map becomes an empty list", hub(v1.WidgetSpec{Image: "i", Endpoints: map[string]v1.EndpointSpec{}}, nil), spoke(v1alpha1.WidgetSpec{Image: "i", Endpoints: []v1alpha1.Endpoint{}}, nil)},
		{"endpoint list sorted by name", hub(v1.WidgetSpec{Image: "i", Endpoints: map[string]v1.EndpointSpec{"web": {Port: 80}, "admin": {Port: 1}, "grpc": {Port: 9090}}}, nil),
			spoke(v1alpha1.WidgetSpec{Image: "i", Endpoints: []v1alpha1.Endpoint{{Name: "admin", Port: 1}, {Name: "grpc", Port: 9090}, {Name: "web", Port: 80}}}, nil)},
		{"endpoints in the order a v1alpha1 client wrote", hub(v1.WidgetSpec{Image: "i", Endpoints: map[string]v1.EndpointSpec{"web": {Port: 80}, "admin": {Port: 1}, "grpc": {Port: 9090}}},
			map[string]string{conversion.EndpointOrderAnnotation: "web,admin,grpc"}),
			spoke(v1alpha1.WidgetSpec{Image: "i", Endpoints: []v1alpha1.Endpoint{{Name: "web", Port: 80}, {Name: "admin", Port: 1}, {Name: "grpc", Port: 9090}}}, nil)},
		{"a stale order orders what it names and is kept", hub(v1.WidgetSpec{Image: "i", Endpoints: map[string]v1.EndpointSpec{"web": {Port: 80}, "admin": {Port: 1}, "grpc": {Port: 9090}}},
			map[string]string{conversion.EndpointOrderAnnotation: "web,gone,admin"}),
			spoke(v1alpha1.WidgetSpec{Image: "i", Endpoints: []v1alpha1.Endpoint{{Name: "web", Port: 80}, {Name: "admin", Port: 1}, {Name: "grpc", Port: 9090}}},
				data(conversion.RestoreData{EndpointOrder: ptr.To("web,gone,admin")}))},
		{"canonical timeout needs no annotation", hub(v1.WidgetSpec{Image: "i", Timeout: ptr.To("1m30s")}, nil), spoke(v1alpha1.WidgetSpec{Image: "i", TimeoutSeconds: ptr.To[int32](90)}, nil)},
		{"1.5s rounds up to 2 and is kept", hub(v1.WidgetSpec{Image: "i", Timeout: ptr.To("1.5s")}, nil),
			spoke(v1alpha1.WidgetSpec{Image: "i", TimeoutSeconds: ptr.To[int32](2)}, data(conversion.RestoreData{Timeout: ptr.To("1.5s")}))},
		{"1m is 60 seconds, spelling kept", hub(v1.WidgetSpec{Image: "i", Timeout: ptr.To("1m")}, nil),
			spoke(v1alpha1.WidgetSpec{Image: "i", TimeoutSeconds: ptr.To[int32](60)}, data(conversion.RestoreData{Timeout: ptr.To("1m")}))},
		{"1h is 3600 seconds, spelling kept", hub(v1.WidgetSpec{Image: "i", Timeout: ptr.To("1h")}, nil),
			spoke(v1alpha1.WidgetSpec{Image: "i", TimeoutSeconds: ptr.To[int32](3600)}, data(conversion.RestoreData{Timeout: ptr.To("1h")}))},
		{"1ns rounds up to 1", hub(v1.WidgetSpec{Image: "i", Timeout: ptr.To("1ns")}, nil),
			spoke(v1alpha1.WidgetSpec{Image: "i", TimeoutSeconds: ptr.To[int32](1)}, data(conversion.RestoreData{Timeout: ptr.To("1ns")}))},
		{"paused travels in the annotation", hub(v1.WidgetSpec{Image: "i", Paused: ptr.To(true)}, map[string]string{"a": "b"}),
			spoke(v1alpha1.WidgetSpec{Image: "i"}, map[string]string{"a": "b", conversion.DataAnnotation: `{"paused":true}`})},
		{"an annotation no longer needed is removed", hub(v1.WidgetSpec{Image: "i"}, data(conversion.RestoreData{Paused: ptr.To(true)})), spoke(v1alpha1.WidgetSpec{Image: "i"}, nil)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := &v1alpha1.Widget{}
			if err := conversion.ConvertWidgetFromHub(context.Background(), tc.in, got); err != nil {
				t.Fatal(err)
			}
			tc.want.TypeMeta = metav1.TypeMeta{APIVersion: "widgetry.io/v1alpha1", Kind: "Widget"}
			if d := conversiontest.Diff(tc.want, got); d != "" {
				t.Error(d)
			}
		})
	}
}

func TestConversionErrors(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		convert func() error
		want    []string
	}{
		{"duplicate endpoint name is an error, never an overwrite", func() error {
			return conversion.ConvertWidgetToHub(ctx, spoke(v1alpha1.WidgetSpec{Image: "i", Endpoints: []v1alpha1.Endpoint{{Name: "a", Port: 1}, {Name: "b", Port: 2}, {Name: "a", Port: 3}}}, nil), &v1.Widget{})
		}, []string{"ns/w", "spec.endpoints[2]", `duplicate endpoint name "a"`}},
		{"malformed conversion data", func() error {
			return conversion.ConvertWidgetToHub(ctx, spoke(v1alpha1.WidgetSpec{Image: "i"}, map[string]string{conversion.DataAnnotation: "{not json"}), &v1.Widget{})
		}, []string{"ns/w", conversion.DataAnnotation, "remove it"}},
		{"timeout that is not a duration", func() error {
			return conversion.ConvertWidgetFromHub(ctx, hub(v1.WidgetSpec{Image: "i", Timeout: ptr.To("soon")}, nil), &v1alpha1.Widget{})
		}, []string{"ns/w", `spec.timeout "soon"`}},
		{"zero timeout cannot be whole positive seconds", func() error {
			return conversion.ConvertWidgetFromHub(ctx, hub(v1.WidgetSpec{Image: "i", Timeout: ptr.To("0s")}, nil), &v1alpha1.Widget{})
		}, []string{"must be positive"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.convert()
			if err == nil {
				t.Fatal("conversion succeeded, want an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

// TestMetadataAndStatusPassThrough: conversion never rewrites what the apiserver or other
// clients own: metadata (apart from the conversion-data annotation) and status.
func TestMetadataAndStatusPassThrough(t *testing.T) {
	in := conversiontest.RealisticWidget("team-a", 7)
	in.Spec.TimeoutSeconds = ptr.To[int32](2)
	in.Annotations[conversion.DataAnnotation] = `{"timeout":"1.5s","paused":true}`
	hubObj := &v1.Widget{}
	if err := conversion.ConvertWidgetToHub(context.Background(), in.DeepCopy(), hubObj); err != nil {
		t.Fatal(err)
	}
	wantMeta := in.ObjectMeta.DeepCopy()
	delete(wantMeta.Annotations, conversion.DataAnnotation)
	if d := conversiontest.Diff(*wantMeta, hubObj.ObjectMeta); d != "" {
		t.Errorf("metadata changed on the way to the hub %s", d)
	}
	if d := conversiontest.Diff(in.Status.Conditions, hubObj.Status.Conditions); d != "" || hubObj.Status.AvailableReplicas != in.Status.AvailableReplicas || hubObj.Status.ObservedGeneration != in.Status.ObservedGeneration {
		t.Errorf("status changed on the way to the hub %s", d)
	}
	if !ptr.Deref(hubObj.Spec.Paused, false) || *hubObj.Spec.Timeout != "1.5s" {
		t.Errorf("hub spec lost restored fields: %+v", hubObj.Spec)
	}
}
