package reports

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The multi-node test's record renders as the time to come up and every node's memory; a
// record that no run of several nodes could have written is refused, not rendered.
func TestClusterCost(t *testing.T) {
	dir := t.TempDir()
	write := func(body string) string {
		t.Helper()
		p := filepath.Join(dir, ClusterCostFile)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	c, err := ReadClusterCost(write(`{"date": "2026-12-07T14:00:00Z", "machine": "2 cores, linux/amd64", "upSeconds": 41.4,
		"controlPlaneMiB": 612.2, "nodes": [{"name": "widget-node", "mib": 160.4}, {"name": "widget-node-2", "mib": 120.6},
		{"name": "widget-node-3", "mib": 119.5}]}`))
	if err != nil {
		t.Fatal(err)
	}
	got := c.Text()
	for _, want := range []string{"**3 nodes**", "**41 s**", "control plane held 612 MiB",
		"widget-node 160 MiB, widget-node-2 121 MiB, widget-node-3 120 MiB (400 MiB together"} {
		if !strings.Contains(got, want) {
			t.Errorf("rendered %q, want it to contain %q", got, want)
		}
	}
	for _, bad := range []string{
		`{"upSeconds": 40, "controlPlaneMiB": 600, "nodes": [{"name": "widget-node", "mib": 160}]}`,
		`{"upSeconds": 0, "controlPlaneMiB": 600, "nodes": [{"name": "a", "mib": 1}, {"name": "b", "mib": 1}]}`,
		`{"upSeconds": 40, "controlPlaneMiB": 600, "nodes": [{"name": "a", "mib": 1}, {"name": "b", "mib": 0}]}`,
		`{"upSeconds": `,
	} {
		if _, err := ReadClusterCost(write(bad)); err == nil {
			t.Errorf("%s: read without an error", bad)
		}
	}
}
