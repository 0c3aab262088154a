package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"

	jsonpatch "gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	v1 "github.com/widgetry/widget-operator/api/v1"
	"github.com/widgetry/widget-operator/api/v1alpha1"
	"github.com/widgetry/widget-operator/internal/conversion"
)

// Defaulter is the mutating webhook. It keeps the name the manager registers it under but
// no longer applies defaults: the apiserver applies the CRD schema's, the same ones, when it
// decodes a request, before any webhook runs, so the webhook's defaults never changed
// anything (and the chart calls it on UPDATE only).
//
// What it does: a client that writes a whole Widget through v1alpha1 without the
// conversion-data annotation (kubectl replace, anything that rebuilds the object from its own
// copy) would otherwise un-pause it and round its exact timeout, since v1alpha1 cannot see
// either. On such an UPDATE the fields v1alpha1 cannot express are kept from the stored
// object, by the conversion package's own rule for a spoke edit (conversion.SpecToHub with
// the stored object's restore data): paused always, the exact timeout while the request's
// timeoutSeconds is still the stored timeout rounded up, and not once a v1alpha1 client has
// changed timeoutSeconds. Through v1 everything is expressible, so nothing is kept.
//
// The result is a JSON patch of the object in the version the apiserver sent it in: with
// matchPolicy Equivalent a v1alpha1 request may arrive converted to v1 (RequestKind says what
// the client used, Kind what was sent). As v1alpha1 the patch writes the annotation; as v1
// it writes spec.paused and spec.timeout. Running it twice, or after another webhook,
// changes nothing more.
//
// Where the cluster serves MutatingAdmissionPolicy, the chart's policy computes the same in
// CEL for annotations in the form RestoreData.Marshal writes, and the apiserver calls this
// handler only for the rest (doc.go). A change to these rules (conversion.SpecToHub,
// SpecFromHub, Marshal) is a change to the policy too (the chart's _helpers.tpl,
// widget-operator.keptConversionData); TestKeepingRoutesAgree holds the two together.
type Defaulter struct{}

// Handle implements admission.Handler.
func (Defaulter) Handle(_ context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Update || requestVersion(req) != v1alpha1.GroupVersion.Version {
		return admission.Allowed("")
	}
	// As in the Validator: a Widget being deleted can always lose its finalizers, even one
	// whose conversion-data annotation cannot be decoded.
	if onlyRemovesFinalizersWhileDeleting(req) {
		return admission.Allowed("")
	}
	obj, err := decodeAdmissionObject(req)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	old, err := decodeWidget(req.Kind, req.OldObject.Raw)
	var hidden conversion.RestoreData
	if err == nil {
		hidden, err = conversion.SpecFromHub(&old.hub.Spec, &v1alpha1.WidgetSpec{})
	}
	if err != nil {
		// Refusing would also refuse the v1alpha1 write that repairs the stored object, the
		// only way left to change it when conversion cannot read it.
		return admission.Allowed("").WithWarnings(fmt.Sprintf(
			"the stored Widget's v1-only fields (spec.paused, the exact spec.timeout) could not be read, so this v1alpha1 update cannot keep them: %v", err))
	}

	// The request as v1alpha1 sees it, plus what the stored object holds beyond that.
	requested := obj.spoke
	if requested == nil {
		requested = &v1alpha1.Widget{}
		if _, err := conversion.SpecFromHub(&obj.hub.Spec, &requested.Spec); err != nil {
			return admission.Errored(http.StatusBadRequest, err)
		}
	}
	want := v1.WidgetSpec{}
	if err := conversion.SpecToHub(&requested.Spec, hidden, &want); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}

	var patches []jsonpatch.JsonPatchOperation
	if obj.spoke != nil {
		patches, err = keepAsAnnotation(obj.spoke, &want)
	} else {
		patches, err = keepAsFields(req.Object.Raw, &obj.hub.Spec, &want)
	}
	if err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if len(patches) == 0 {
		return admission.Allowed("")
	}
	return admission.Patched("kept the v1 fields v1alpha1 cannot express from the stored Widget", patches...)
}

// requestVersion is the version the client used (RequestKind), which with matchPolicy
// Equivalent may differ from the one the object was sent in (Kind).
func requestVersion(req admission.Request) string {
	if req.RequestKind != nil {
		return req.RequestKind.Version
	}
	return req.Kind.Version
}

// keepAsAnnotation patches a v1alpha1 object's conversion-data annotation to carry what want
// holds beyond the spoke, leaving an annotation that already says so alone.
func keepAsAnnotation(spoke *v1alpha1.Widget, want *v1.WidgetSpec) ([]jsonpatch.JsonPatchOperation, error) {
	data, err := conversion.SpecFromHub(want, &v1alpha1.WidgetSpec{})
	if err != nil {
		return nil, err
	}
	value, has := spoke.Annotations[conversion.DataAnnotation]
	if has {
		// Decoding the object already parsed it, so this cannot fail.
		if current, err := conversion.ParseRestoreData(value); err == nil {
			// The endpoint order it keeps is the request's own business: conversion to v1
			// uses it only while the request's list still follows it.
			data.EndpointOrder = current.EndpointOrder
			if reflect.DeepEqual(current, data) {
				return nil, nil
			}
		}
	}
	path := "/metadata/annotations/" + jsonPointerEscape(conversion.DataAnnotation)
	switch {
	case data.IsZero() && has:
		return []jsonpatch.JsonPatchOperation{{Operation: "remove", Path: path}}, nil
	case data.IsZero():
		return nil, nil
	case spoke.Annotations == nil:
		return []jsonpatch.JsonPatchOperation{{Operation: "add", Path: "/metadata/annotations",
			Value: conversion.WithRestoreData(nil, data)}}, nil
	}
	return []jsonpatch.JsonPatchOperation{{Operation: "add", Path: path, Value: data.Marshal()}}, nil
}

// keepAsFields patches a v1 object's spec.paused and spec.timeout to want's.
func keepAsFields(raw []byte, got, want *v1.WidgetSpec) ([]jsonpatch.JsonPatchOperation, error) {
	var patches []jsonpatch.JsonPatchOperation
	set := func(name string, value any, present bool) {
		if present {
			patches = append(patches, jsonpatch.JsonPatchOperation{Operation: "add", Path: "/spec/" + name, Value: value})
		} else {
			patches = append(patches, jsonpatch.JsonPatchOperation{Operation: "remove", Path: "/spec/" + name})
		}
	}
	if !reflect.DeepEqual(got.Paused, want.Paused) {
		set("paused", want.Paused, want.Paused != nil)
	}
	if !reflect.DeepEqual(got.Timeout, want.Timeout) {
		set("timeout", want.Timeout, want.Timeout != nil)
	}
	if len(patches) == 0 {
		return nil, nil
	}
	// A spec the object lacks altogether has to be added whole (JSON patch adds no parents).
	var fields struct {
		Spec map[string]json.RawMessage `json:"spec"`
	}
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, err
	}
	if fields.Spec == nil {
		spec := map[string]any{}
		for _, p := range patches {
			if p.Operation == "add" {
				spec[strings.TrimPrefix(p.Path, "/spec/")] = p.Value
			}
		}
		return []jsonpatch.JsonPatchOperation{{Operation: "add", Path: "/spec", Value: spec}}, nil
	}
	return patches, nil
}

// jsonPointerEscape escapes a map key for a JSON pointer (RFC 6901).
func jsonPointerEscape(key string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(key)
}
