package conversiontest

import (
	"embed"
	"encoding/json"
	"os"
	"path"
	"reflect"
	"strconv"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// released holds the Widget CRD as every released chart shipped it, one file per chart
// version (widget-operator-<version>.yaml), so that conversion is shown total over the
// objects any release admitted, not only today's schema. TestReleasedSchemasKept fails when
// the chart's version has no file or its file differs from today's CRD.
//
//go:embed released/*.yaml
var released embed.FS

// Released returns the CRD each released chart shipped, by chart version.
func Released() (map[string]*apiextensionsv1.CustomResourceDefinition, error) {
	entries, err := released.ReadDir("released")
	if err != nil {
		return nil, err
	}
	out := map[string]*apiextensionsv1.CustomResourceDefinition{}
	for _, e := range entries {
		b, err := released.ReadFile(path.Join("released", e.Name()))
		if err != nil {
			return nil, err
		}
		c := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(b, c); err != nil {
			return nil, err
		}
		out[strings.TrimSuffix(strings.TrimPrefix(e.Name(), "widget-operator-"), ".yaml")] = c
	}
	return out, nil
}

// Iterations is how many objects a round trip draws: 10,000 by default (make test), more
// through WIDGET_ROUNDTRIP_ITERATIONS (make test-long).
func Iterations(t testing.TB) int {
	if s := os.Getenv("WIDGET_ROUNDTRIP_ITERATIONS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("WIDGET_ROUNDTRIP_ITERATIONS=%q: want a positive integer", s)
		}
		return n
	}
	return 10000
}

// SameSchemas reports whether a and b have the same versions with the same schemas,
// descriptions aside (they change no object's fate and may be reworded in any release).
func SameSchemas(a, b *apiextensionsv1.CustomResourceDefinition) bool {
	if len(a.Spec.Versions) != len(b.Spec.Versions) {
		return false
	}
	for i := range a.Spec.Versions {
		x, y := a.Spec.Versions[i], b.Spec.Versions[i]
		if x.Name != y.Name || !reflect.DeepEqual(withoutDescriptions(x.Schema), withoutDescriptions(y.Schema)) {
			return false
		}
	}
	return true
}

// withoutDescriptions is a schema as generic JSON without its descriptions.
func withoutDescriptions(s *apiextensionsv1.CustomResourceValidation) any {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err) // a CustomResourceValidation always marshals
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		panic(err)
	}
	var strip func(any)
	strip = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			// A property named description is a schema (an object), not a description.
			if _, ok := v["description"].(string); ok {
				delete(v, "description")
			}
			for _, c := range v {
				strip(c)
			}
		case []any:
			for _, c := range v {
				strip(c)
			}
		}
	}
	strip(v)
	return v
}
