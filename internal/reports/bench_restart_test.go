package reports

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const restartRun = `goos: linux
BenchmarkControllerRestartAtScale-2   	       1	16350835464 ns/op	         %s create-reconciles/widget	        14.88 heap-live-MiB	        44.21 populate-s	       242.1 reconciles-per-s	         8.260 restart-s	         %s restart-writes	        73.68 rss-peak-MiB	        %s rss-settled-MiB	        30.5 rss-anon-settled-MiB	      %s
PASS
`

// restartResults is a report with the given figures; widgets is "N widgets", or "" for a
// report that does not say its size.
func restartResults(t *testing.T, reconciles, writes, settled, widgets string) []BenchResult {
	t.Helper()
	text := restartRun
	for _, v := range []string{reconciles, writes, settled, widgets} {
		text = strings.Replace(text, "%s", v, 1)
	}
	res, err := ParseBench(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// One column per fleet size, each target in bold when met and marked when missed; a report
// without its size, with two runs or with none is refused.
func TestRestartTable(t *testing.T) {
	got, err := RestartTable(restartResults(t, "1.000", "0", "73.44", "10000 widgets"), restartResults(t, "1.500", "3", "300.2", "100000 widgets"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| figure | 10,000 Widgets | 100,000 Widgets | target |",
		"| reconciles per created Widget | **1.000** | 1.500 (missed) | 1 (≤ 1.01) |",
		"| … writes to Widgets and children meanwhile | **0** | 3 (missed) | 0 |",
		"| resident memory once settled (below 5% of a core) | **73 MiB** | 300 MiB (missed) | ≤ 256 MiB |",
		"| a new controller process: every Widget reconciled once | 8 s | 8 s |  |",
		"| each further 10,000 Widgets add: resident memory / live heap | 25.2 MiB / 0.0 MiB |  |  |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("rendered\n%s\nwant it to contain %q", got, want)
		}
	}
	if _, err := RestartTable(restartResults(t, "1", "0", "70", "")); err == nil {
		t.Error("a run without its number of Widgets rendered")
	}
	two := restartResults(t, "1", "0", "70", "10000 widgets")
	two[0].Runs = 2
	if _, err := RestartTable(two); err == nil {
		t.Error("two runs of one size rendered")
	}
	if _, err := RestartTable(restartResults(t, "1", "0", "300", "100000 widgets"), restartResults(t, "1", "0", "70", "10000 widgets")); err == nil {
		t.Error("runs in shrinking size rendered")
	}
	if _, err := RestartTable(nil); err == nil {
		t.Error("no results rendered")
	}
}

func TestThousands(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 999: "999", 1000: "1,000", 100000: "100,000", 1234567: "1,234,567"} {
		if got := thousands(v); got != want {
			t.Errorf("thousands(%v) = %q, want %q", v, got, want)
		}
	}
}

// The block renders the 10,000-Widget run alone, saying so, until a 100,000-Widget run is
// published; without the 10,000-Widget run it fails.
func TestRestartBlock(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, DataDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := restartBlock(root); err == nil {
		t.Error("rendered without any report")
	}
	write := func(file, settled, widgets string) {
		text := restartRun
		for _, v := range []string{"1.000", "0", settled, widgets} {
			text = strings.Replace(text, "%s", v, 1)
		}
		if err := os.WriteFile(filepath.Join(root, DataDir, file), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(RestartBenchFile, "100.4", "10000 widgets")
	got, err := restartBlock(root)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got, "| figure | 10,000 Widgets | target |") || !strings.Contains(got, "No run at 100,000 Widgets has been published yet") {
		t.Errorf("rendered\n%s\nwant the 10,000 column and the note", got)
	}
	write(RestartBench100kFile, "240.0", "100000 widgets")
	got, err = restartBlock(root)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got, "| figure | 10,000 Widgets | 100,000 Widgets | target |") || strings.Contains(got, "No run") {
		t.Errorf("rendered\n%s\nwant both columns and no note", got)
	}
}
