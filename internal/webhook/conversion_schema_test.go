// Built without -race only (make test-unit runs it in its second go test): it runs the
// apiserver's CEL validators over 10,000 objects, minutes under the detector.

//go:build !race

package webhook

import (
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	kjson "k8s.io/apimachinery/pkg/util/json"

	"github.com/widgetry/widget-operator/internal/conversion/conversiontest"
	"github.com/widgetry/widget-operator/internal/conversion/conversiontest/schemagen"
	"github.com/widgetry/widget-operator/internal/crd"
)

// schemaReviewSize is how many objects one review of the schema round trip carries.
const schemaReviewSize = 100

// TestRoundTripOverTheSchemas: conversion is total and exact over every object the
// apiserver admits. For today's CRD and every schema a released chart shipped, objects drawn
// from each version's schema (schemagen: at every bound, unicode included, each one passing the
// apiserver's own OpenAPI and CEL validators) go through the handler to the other version
// and back, a review of many at a time as the apiserver sends them: each converted object is
// one today's CRD admits, and each comes back equal to what was sent, as JSON (list order,
// absent against empty, every number as written).
func TestRoundTripOverTheSchemas(t *testing.T) {
	released, err := conversiontest.Released()
	if err != nil {
		t.Fatal(err)
	}
	// A released schema the same as today's (descriptions aside) admits the same objects:
	// drawing from it again would only spend the time twice.
	sources := map[string]*apiextensionsv1.CustomResourceDefinition{"today": crd.Widget()}
	for v, c := range released {
		if conversiontest.SameSchemas(c, crd.Widget()) {
			t.Logf("chart %s shipped today's schemas: drawn from once, as today's", v)
			continue
		}
		sources["chart "+v] = c
	}
	today := map[string]*schemagen.Version{}
	for _, v := range []string{"v1alpha1", "v1"} {
		if today[v], err = schemagen.VersionOf(crd.Widget(), v); err != nil {
			t.Fatal(err)
		}
	}
	h := &ConversionHandler{}
	n := conversiontest.Iterations(t)
	for _, name := range slices.Sorted(maps.Keys(sources)) {
		for seed, pair := range [][2]string{{"v1alpha1", "v1"}, {"v1", "v1alpha1"}} {
			from, to := pair[0], pair[1]
			t.Run(fmt.Sprintf("%s/%s-%s-%s", name, from, to, from), func(t *testing.T) {
				t.Parallel()
				version, err := schemagen.VersionOf(sources[name], from)
				if err != nil {
					t.Fatal(err)
				}
				g := schemagen.New(int64(seed + 1))
				for start := 0; start < n; start += schemaReviewSize {
					sent := make([]string, 0, schemaReviewSize)
					for i := start; i < min(start+schemaReviewSize, n); i++ {
						obj, err := g.Object(version, "ns", fmt.Sprintf("w-%d", i))
						if err != nil {
							t.Fatal(err)
						}
						sent = append(sent, string(obj))
					}
					there := convertAll(t, h, "widgetry.io/"+to, sent)
					for i, obj := range there {
						if err := today[to].Validate([]byte(obj)); err != nil {
							t.Fatalf("%s converted to %s is refused by today's CRD: %v\nsent:      %.3000s\nconverted: %.3000s", from, to, err, sent[i], obj)
						}
					}
					back := convertAll(t, h, "widgetry.io/"+from, there)
					for i := range sent {
						if !sameJSON(t, sent[i], back[i]) {
							t.Fatalf("%s -> %s -> %s changed the object\nsent: %.3000s\nvia:  %.3000s\nback: %.3000s", from, to, from, sent[i], there[i], back[i])
						}
					}
				}
				if missing := g.Missing(); len(missing) > 0 && n >= 2000 {
					t.Errorf("bounds never drawn in %d objects: %q", g.Drawn, missing)
				}
				t.Logf("%d objects drawn and round-tripped (%d draws refused by the validators on the way)", g.Drawn, g.Refused)
			})
		}
	}
}

// convertAll sends objs in one review to desired and returns the converted objects.
func convertAll(t *testing.T, h http.Handler, desired string, objs []string) []string {
	t.Helper()
	args := make([]any, len(objs))
	for i, o := range objs {
		args[i] = o
	}
	code, body, review := post(t, h, reviewBody(t, "u", desired, args...))
	if review == nil || review.Response == nil || review.Response.Result.Status != "Success" {
		t.Fatalf("review to %s: HTTP %d %.2000s", desired, code, body)
	}
	if len(review.Response.ConvertedObjects) != len(objs) {
		t.Fatalf("%d objects answered for %d", len(review.Response.ConvertedObjects), len(objs))
	}
	out := make([]string, len(objs))
	for i, o := range review.Response.ConvertedObjects {
		out[i] = string(o.Raw)
	}
	return out
}

// sameJSON compares two JSON texts as the apiserver reads them (whole numbers as int64).
func sameJSON(t *testing.T, a, b string) bool {
	t.Helper()
	var x, y any
	if err := kjson.Unmarshal([]byte(a), &x); err != nil {
		t.Fatal(err)
	}
	if err := kjson.Unmarshal([]byte(b), &y); err != nil {
		t.Fatal(err)
	}
	return reflect.DeepEqual(x, y)
}
