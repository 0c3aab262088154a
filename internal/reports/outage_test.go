package reports

import (
	"path/filepath"
	"strings"
	"testing"
)

func outageRun() OutageMatrix {
	return OutageMatrix{Date: "2026-12-03T21:00:00Z", Machine: "2 cores, linux/amd64", Stage: "migrate", TimeoutSeconds: 10, Rows: []OutageRow{
		{Name: "both gone", Cells: []OutageCell{
			{Column: "create v1", Attempts: 3, Succeeded: 3, WorstMs: 41},
			{Column: "update v1", Attempts: 3, Succeeded: 3, WorstMs: 20},
			{Column: "create v1alpha1", Attempts: 3, Succeeded: 0, WorstMs: 12, NeedsConversion: true},
			{Column: "finalizer removed by the controller", NotMeasured: "the controller is what is gone"},
		}},
		{Name: HungRow, Cells: []OutageCell{
			{Column: "create v1", Attempts: 3, Succeeded: 3, WorstMs: 10012},
			{Column: "update v1", Attempts: 3, Succeeded: 3, WorstMs: 10003},
			{Column: "create v1alpha1", Attempts: 3, Succeeded: 1, WorstMs: 30001, NeedsConversion: true},
			{Column: "finalizer removed by the controller", Attempts: 3, Succeeded: 3, WorstMs: 800},
		}},
	}}
}

// The matrix renders each cell's share and slowest attempt, marks what needs conversion and
// what was not measured, and a report whose rows do not line up is refused.
func TestOutageMatrix(t *testing.T) {
	dir := t.TempDir()
	if err := WriteOutage(dir, outageRun()); err != nil {
		t.Fatal(err)
	}
	m, err := ReadOutage(filepath.Join(dir, OutageFile))
	if err != nil {
		t.Fatal(err)
	}
	got := m.Text()
	for _, want := range []string{
		"At stage `migrate`, webhooks' `timeoutSeconds: 10`",
		"| outage | create v1 | update v1 | create v1alpha1 | finalizer removed by the controller |",
		"| both gone | 100 % · 41 ms | 100 % · 20 ms | 0 % ¹ · 12 ms | — ² |",
		"| " + HungRow + " | 100 % · 10.0 s | 100 % · 10.0 s | 33 % ¹ · 30.0 s | 100 % · 800 ms |",
		"¹ needs the conversion webhook", "² not measured",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("rendered\n%s\nwant it to contain %q", got, want)
		}
	}

	hung, err := m.HungText()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"`timeoutSeconds: 10`", "- " + HungRow + ": a create through v1 10.0 s (3 of 3 succeeded)", "- both gone: a create through v1 41 ms (3 of 3 succeeded)"} {
		if !strings.Contains(hung, want) {
			t.Errorf("hung text\n%s\nwant it to contain %q", hung, want)
		}
	}

	for name, breakIt := range map[string]func(*OutageMatrix){
		"a row with a column of its own": func(m *OutageMatrix) { m.Rows[1].Cells[2].Column = "delete v1" },
		"a row short of a cell":          func(m *OutageMatrix) { m.Rows[1].Cells = m.Rows[1].Cells[:2] },
		"more successes than attempts":   func(m *OutageMatrix) { m.Rows[0].Cells[0].Succeeded = 4 },
		"a measured cell never tried":    func(m *OutageMatrix) { m.Rows[0].Cells[0].Attempts = 0 },
		"no rows":                        func(m *OutageMatrix) { m.Rows = nil },
	} {
		bad := outageRun()
		bad.Rows = append([]OutageRow(nil), bad.Rows...)
		for i := range bad.Rows {
			bad.Rows[i].Cells = append([]OutageCell(nil), bad.Rows[i].Cells...)
		}
		breakIt(&bad)
		if err := WriteOutage(dir, bad); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadOutage(filepath.Join(dir, OutageFile)); err == nil {
			t.Errorf("%s: read without an error", name)
		}
	}
}
