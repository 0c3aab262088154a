package controller

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// AppliedHashAnnotation, on every object the controller applies (a Widget's Deployment and
// Service, its catalog entry), holds a hash of everything else the apply sets (hashApplied).
const AppliedHashAnnotation = "widgetry.io/applied-hash"

// Each reconcile computes a Widget's children whole, and most reconciles change nothing: a
// Deployment's status moved, the controller started again. An apply that changes nothing
// still costs the apiserver a server-side merge, admission and a managedFields comparison,
// for every child of every Widget. So the controller reads the child first and applies only
// when the child differs from what it would apply (current): at most one write per child
// that a change of the Widget really changes.
//
// A read shows what a child has, not what the controller stopped applying: with the Timeout
// unset, the Deployment that still has the WIDGET_TIMEOUT variable contains everything
// desired. The hash of the desired object, applied with it, tells those apart: when what the
// controller applies shrinks, the hash changes, and the child is not current until the apply
// that removes the rest.

// hasAnnotations is an apply configuration that takes annotations.
type hasAnnotations[T any] interface {
	runtime.ApplyConfiguration
	WithAnnotations(map[string]string) T
}

// stampApplied adds AppliedHashAnnotation to desired, with the hash of desired as it came.
func stampApplied[T hasAnnotations[T]](desired T) (T, error) {
	h, err := hashApplied(desired)
	if err != nil {
		return desired, err
	}
	return desired.WithAnnotations(map[string]string{AppliedHashAnnotation: h}), nil
}

// hashApplied is the first 16 hexadecimal digits of the SHA-256 of desired's JSON, whose
// maps encoding/json writes in key order.
func hashApplied(desired runtime.ApplyConfiguration) (string, error) {
	data, err := json.Marshal(desired)
	if err != nil {
		return "", fmt.Errorf("encode %T: %w", desired, err)
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:8]), nil
}

// current reports whether live, an object as read, already has every field desired sets,
// each with the value desired gives it.
//
// desired is compared as an object of live's type, so that both sides drop the same zero
// values: the apiserver's answer omits a Deployment's paused: false, which the apply sets.
// live's kind and apiVersion, when set, are not compared.
func current(live client.Object, desired runtime.ApplyConfiguration) (bool, error) {
	l, err := asJSONValue(live)
	if err != nil {
		return false, err
	}
	typed := reflect.New(reflect.TypeOf(live).Elem()).Interface().(client.Object)
	if err := decodeInto(desired, typed); err != nil {
		return false, err
	}
	// A typed read comes without its kind and apiVersion (client-go clears them), and the
	// apiserver answers for the type asked.
	typed.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
	d, err := asJSONValue(typed)
	if err != nil {
		return false, err
	}
	return contains(l, d), nil
}

// asJSONValue is v as encoding/json decodes its JSON into an any: the same number type (float64)
// and the same field names on both sides, whatever Go types they came from.
func asJSONValue(v any) (any, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode %T: %w", v, err)
	}
	var out any
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("decode %T: %w", v, err)
	}
	return out, nil
}

// contains reports whether live holds desired: every key of a desired map in live's map with a
// value that holds the desired one; a desired list as long as live's (an item someone else
// added, say a sidecar container, makes the child not current: the apply is then the safe
// answer), item by item in the same order; every other value equal. What live has beyond
// desired (defaults, status, fields of other managers) does not matter.
func contains(live, desired any) bool {
	switch d := desired.(type) {
	case map[string]any:
		l, ok := live.(map[string]any)
		if !ok {
			return false
		}
		for k, dv := range d {
			lv, ok := l[k]
			if !ok || !contains(lv, dv) {
				return false
			}
		}
		return true
	case []any:
		l, ok := live.([]any)
		if !ok || len(l) != len(d) {
			return false
		}
		for i := range d {
			if !contains(l[i], d[i]) {
				return false
			}
		}
		return true
	default:
		return reflect.DeepEqual(live, desired)
	}
}
