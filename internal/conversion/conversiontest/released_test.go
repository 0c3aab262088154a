package conversiontest_test

import (
	"os"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/widgetry/widget-operator/internal/conversion/conversiontest"
	"github.com/widgetry/widget-operator/internal/crd"
)

// TestReleasedSchemasKept: the chart's version has its CRD among the released schemas, equal
// to today's, so that a schema change cannot ship under a version whose objects the round
// trips no longer draw. After changing the CRD, bump the chart's version and copy
// internal/crd/bases/widgetry.io_widgets.yaml to
// internal/conversion/conversiontest/released/widget-operator-<version>.yaml; never edit an
// older file.
func TestReleasedSchemasKept(t *testing.T) {
	b, err := os.ReadFile("../../../charts/widget-operator/Chart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var chart struct{ Version string }
	if err := yaml.Unmarshal(b, &chart); err != nil {
		t.Fatal(err)
	}
	all, err := conversiontest.Released()
	if err != nil {
		t.Fatal(err)
	}
	shipped, ok := all[chart.Version]
	if !ok {
		t.Fatalf("chart version %s has no released schema: copy internal/crd/bases/widgetry.io_widgets.yaml to internal/conversion/conversiontest/released/widget-operator-%s.yaml", chart.Version, chart.Version)
	}
	today := crd.Widget()
	if !conversiontest.SameSchemas(shipped, today) {
		t.Errorf("today's CRD schemas differ from the ones chart %s shipped: bump the chart's version and add its released schema (never edit a released one)", chart.Version)
	}
}
