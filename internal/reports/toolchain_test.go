package reports

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The record scripts/toolchain.sh writes renders as its total and its three slowest tools;
// a record that could not come from a full run is refused, not rendered.
func TestToolchainBuild(t *testing.T) {
	dir := t.TempDir()
	write := func(body string) string {
		t.Helper()
		p := filepath.Join(dir, ToolchainFile)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	p := write(`{"date": "2026-12-03T08:51:00Z", "machine": "2 cores, Linux x86_64", "goCache": "cold", "seconds": 1185,
		"tools": [{"name": "etcd", "seconds": 95}, {"name": "kube-apiserver", "seconds": 410}, {"name": "kubectl", "seconds": 60},
		{"name": "kubelet", "seconds": 130}, {"name": "helm4", "seconds": 70}]}`)
	tb, err := ReadToolchainBuild(p)
	if err != nil {
		t.Fatal(err)
	}
	got := tb.Text()
	for _, want := range []string{"**19 min 45 s**", "Go's build cache cold", "kube-apiserver 6 min 50 s, kubelet 2 min 10 s, etcd 1 min 35 s."} {
		if !strings.Contains(got, want) {
			t.Errorf("rendered %q, want it to contain %q", got, want)
		}
	}
	for _, bad := range []string{
		`{"goCache": "cold", "seconds": 10, "tools": []}`,
		`{"goCache": "cold", "seconds": 0, "tools": [{"name": "etcd", "seconds": 1}]}`,
		`{"goCache": "hot", "seconds": 10, "tools": [{"name": "etcd", "seconds": 1}]}`,
		`{"goCache": `,
	} {
		if _, err := ReadToolchainBuild(write(bad)); err == nil {
			t.Errorf("%s: read without an error", bad)
		}
	}
}
