// Built without -race only (make test-unit runs it in its second go test): it runs the
// apiserver's CEL validators over 10,000 objects, minutes under the detector.

//go:build !race

package schemagen_test

import (
	"testing"

	"github.com/widgetry/widget-operator/internal/conversion/conversiontest/schemagen"
	"github.com/widgetry/widget-operator/internal/crd"
)

// TestDrawsWhatTheAPIServerAdmitsAtEveryBound: the drawn objects pass the apiserver's own
// validators (Object draws again otherwise, so this holds the refusal rate low: a generator
// drifting from the schema would spend its draws on refusals), and every bound of every
// served version is reached.
func TestDrawsWhatTheAPIServerAdmitsAtEveryBound(t *testing.T) {
	c := crd.Widget()
	for _, version := range []string{"v1alpha1", "v1"} {
		t.Run(version, func(t *testing.T) {
			v, err := schemagen.VersionOf(c, version)
			if err != nil {
				t.Fatal(err)
			}
			g := schemagen.New(1)
			for range 2000 {
				if _, err := g.Object(v, "ns", "w"); err != nil {
					t.Fatal(err)
				}
			}
			t.Logf("%d objects drawn, %d draws refused (the last: %v)", g.Drawn, g.Refused, g.LastRefusal)
			if g.Refused > g.Drawn/2 {
				t.Errorf("%d of %d draws refused by the apiserver's validators: the generator no longer follows the schema; the last: %v", g.Refused, g.Drawn+g.Refused, g.LastRefusal)
			}
			if missing := g.Missing(); len(missing) > 0 {
				t.Errorf("bounds never reached in %d objects: %q", g.Drawn, missing)
			}
			t.Logf("bounds reached: %v", g.Bounds)
		})
	}
}
