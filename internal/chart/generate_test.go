package chart

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/widgetry/widget-operator/internal/monitoring"
)

// TestGeneratedFilesUpToDate fails when make generate would change the chart.
func TestGeneratedFilesUpToDate(t *testing.T) {
	files, err := Files(root)
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range files {
		got, err := os.ReadFile(filepath.Join(root, p))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s is not what go run ./internal/chart/gen writes (err %v): run make generate", p, err)
		}
	}
	// No stale dashboards: the chart ships exactly the generated ones, equal to dashboards/ once
	// the chart's defaults replace their sentinels.
	ds, err := monitoring.Dashboards()
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(filepath.Join(root, DashboardsDir))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if _, ok := ds[e.Name()]; !ok {
			t.Errorf("%s/%s is not a generated dashboard: remove it", DashboardsDir, e.Name())
		}
		top, err := os.ReadFile(filepath.Join(root, "dashboards", e.Name()))
		chart, _ := os.ReadFile(filepath.Join(root, DashboardsDir, e.Name()))
		if err != nil || !bytes.Equal(top, monitoring.FillHelmDashboard(chart, monitoring.DefaultConfig())) {
			t.Errorf("dashboards/%s and the chart's copy differ (err %v): run make generate", e.Name(), err)
		}
	}
}

func TestValuesTable(t *testing.T) {
	vals, err := Values([]byte(`
# -- A section's own comment is ignored when its keys are documented.
a:
  # -- The stage.
  # Continues here.
  stage: initial
  # -- Resources.
  res:
    limits:
      cpu: 1
# @section -- Maps
# -- Free map.
m: {}
# -- In the same section.
n: 1
`))
	if err != nil {
		t.Fatal(err)
	}
	want := []Value{
		{Path: "a.stage", Type: "string", Default: `"initial"`, Description: "The stage. Continues here."},
		{Path: "a.res", Type: "object", Default: `{"limits":{"cpu":1}}`, Description: "Resources."},
		{Path: "m", Type: "object", Default: `{}`, Description: "Free map.", Section: "Maps"},
		{Path: "n", Type: "integer", Default: `1`, Description: "In the same section.", Section: "Maps"},
	}
	if len(vals) != len(want) {
		t.Fatalf("got %+v", vals)
	}
	for i := range want {
		if vals[i] != want[i] {
			t.Errorf("value %d: got %+v, want %+v", i, vals[i], want[i])
		}
	}
	if _, err := Values([]byte("a:\n  # -- documented\n  b: 1\n  c: 2\n")); err == nil || !strings.Contains(err.Error(), "a.c") {
		t.Errorf("an undocumented value passed: %v", err)
	}
	readme, err := RenderReadme([]byte("# R\n"+valuesBegin+"\nold\n"+valuesEnd+"\n"), []byte("# -- First.\nf: 1\n# @section -- Second\n# -- S.\ns: x\n"))
	if err != nil {
		t.Fatal(err)
	}
	table := "| Value | Type | Default | Description |\n| --- | --- | --- | --- |\n"
	wantReadme := "# R\n" + valuesBegin + "\n" + table + "| `f` | integer | `1` | First. |\n\n### Second\n\n" + table + "| `s` | string | `\"x\"` | S. |\n" + valuesEnd + "\n"
	if string(readme) != wantReadme {
		t.Errorf("README:\n%s\nwant:\n%s", readme, wantReadme)
	}
}
