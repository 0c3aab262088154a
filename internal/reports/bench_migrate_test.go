package reports

import (
	"fmt"
	"strings"
	"testing"
)

// migrateRun is BenchmarkReencode output with each variant's objects/s from rates.
func migrateRun(objects map[string]float64, rates map[string]float64) string {
	names := []string{"a-migrator-main", "a1-migrator-status", "b-floor", "b1-floor-status", "c-svm-put-qps40", "d-capi-patch-qps100", "d1-capi-patch-status-qps100"}
	var b strings.Builder
	b.WriteString("goos: linux\n")
	for _, name := range names {
		key, _, _ := strings.Cut(name, "-")
		r, ok := rates[key]
		if !ok {
			continue
		}
		n, ok := objects[key]
		if !ok {
			n = 10000
		}
		fmt.Fprintf(&b, "BenchmarkReencode/variant=%s-2   \t       1\t90000000000 ns/op\t%.0f objects\t%.1f objects/s\t200 apiserver-p99-ms\t4.00 admission-reviews/object\n", name, n, r)
	}
	b.WriteString("PASS\n")
	return b.String()
}

// Every variant and ratio renders, the two targets in bold when met and marked when missed;
// variants on different numbers of objects, or a missing published variant, are refused.
func TestMigrateTable(t *testing.T) {
	rates := map[string]float64{"a": 120, "a1": 150, "b": 125, "b1": 140, "c": 60, "d": 80, "d1": 90}
	res, err := ParseBench(strings.NewReader(migrateRun(nil, rates)))
	if err != nil {
		t.Fatal(err)
	}
	got, err := MigrateTable(res)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"10000 Widgets re-encoded", "| a′ | this migrator, through /status", "| 150.0 | 200 ms | 4.00 | 1 |",
		"| a/b | **0.96** | ≥ 0.9", "| a′/b′ | **1.07** | ≥ 1.0", "| a/d | 1.50 | information", "| a′/d′ | 1.67 | information"} {
		if !strings.Contains(got, want) {
			t.Errorf("rendered\n%s\nwant it to contain %q", got, want)
		}
	}
	if strings.Contains(got, "a/e") {
		t.Errorf("a ratio with a variant that did not run rendered:\n%s", got)
	}

	rates["b1"] = 160
	res, _ = ParseBench(strings.NewReader(migrateRun(nil, rates)))
	if got, _ := MigrateTable(res); !strings.Contains(got, "| a′/b′ | 0.94 (missed) |") {
		t.Errorf("a missed a′/b′ is not marked:\n%s", got)
	}

	res, _ = ParseBench(strings.NewReader(migrateRun(map[string]float64{"c": 500}, rates)))
	if _, err := MigrateTable(res); err == nil {
		t.Error("variants on different numbers of objects rendered")
	}
	delete(rates, "b1")
	res, _ = ParseBench(strings.NewReader(migrateRun(nil, rates)))
	if _, err := MigrateTable(res); err == nil || !strings.Contains(err.Error(), "b1") {
		t.Errorf("a run without b′ rendered (err %v)", err)
	}
}
