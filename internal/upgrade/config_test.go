package upgrade

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func widget(apiVersion string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": apiVersion, "kind": "Widget",
		"metadata": map[string]any{"name": "w", "namespace": "ns", "uid": "u"},
		"spec":     spec,
	}}
}

// TestCompareWidgetVersionsIsStrict: the two reads of a Widget must agree field by field. An
// empty endpoints list read through v1alpha1 against no endpoints through v1 is a conversion
// losing the difference between empty and missing (equality.Semantic calls them equal); a
// changed port is the plain case.
func TestCompareWidgetVersionsIsStrict(t *testing.T) {
	alpha := func(endpoints any) *unstructured.Unstructured {
		spec := map[string]any{"image": "i", "replicas": int64(1)}
		if endpoints != nil {
			spec["endpoints"] = endpoints
		}
		return widget("widgetry.io/v1alpha1", spec)
	}
	hub := func(endpoints any) *unstructured.Unstructured {
		spec := map[string]any{"image": "i", "size": int64(1)}
		if endpoints != nil {
			spec["endpoints"] = endpoints
		}
		return widget("widgetry.io/v1", spec)
	}
	port := func(p int64) map[string]any { return map[string]any{"port": p} }
	for _, tc := range []struct {
		name        string
		alpha, hub  *unstructured.Unstructured
		wantMessage string
	}{
		{"the same", alpha([]any{map[string]any{"name": "a", "port": int64(80)}}), hub(map[string]any{"a": port(80)}), ""},
		{"both without endpoints", alpha(nil), hub(nil), ""},
		{"both empty", alpha([]any{}), hub(map[string]any{}), ""},
		{"empty against missing", alpha([]any{}), hub(nil), "spec.endpoints: {} != (absent)"},
		{"missing against empty", alpha(nil), hub(map[string]any{}), "spec.endpoints: (absent) != {}"},
		{"a changed port", alpha([]any{map[string]any{"name": "a", "port": int64(80)}}), hub(map[string]any{"a": port(81)}), "spec.endpoints.a.port: 80 != 81"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := compareWidgetVersions(map[string]*unstructured.Unstructured{"v1alpha1": tc.alpha, "v1": tc.hub})
			switch {
			case tc.wantMessage == "" && err != nil:
				t.Errorf("unexpected mismatch: %v", err)
			case tc.wantMessage != "" && (err == nil || !strings.Contains(err.Error(), tc.wantMessage)):
				t.Errorf("got %v, want a mismatch naming %q", err, tc.wantMessage)
			}
		})
	}
}
