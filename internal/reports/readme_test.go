package reports

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/widgetry/widget-operator/internal/testenv/prereq"
)

// wantBlocks are the generated blocks each README must hold: a block deleted with its figures
// pasted back by hand must fail the test too.
var wantBlocks = map[string][]string{
	"README.md":                        {"make-test-times", "bench-conversion", "bench-list", "bench-list-100k", "bench-manager", "bench-restart", "bench-migrate", "production-proof", "outage-matrix"},
	"charts/widget-operator/README.md": {"bench-list", "bench-manager", "bench-restart", "outage-hung"},
}

// TestREADMEsMatchTheirReports: every generated block of every README is exactly what its
// committed report renders. Fix a failure with make reports (after the run that wrote the
// report), never by editing the README.
func TestREADMEsMatchTheirReports(t *testing.T) {
	root := prereq.RepoRoot(t)
	for _, name := range READMEs {
		b, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		blocks := Blocks(string(b))
		for _, want := range wantBlocks[name] {
			if !strings.Contains(" "+strings.Join(blocks, " ")+" ", " "+want+" ") {
				t.Errorf("%s has no generated block %q (blocks: %v)", name, want, blocks)
			}
		}
		rendered, err := Render(root, string(b))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if rendered != string(b) {
			t.Errorf("%s differs from its committed reports (run make reports; never edit a generated block):\n%s", name, firstDifference(string(b), rendered))
		}
	}
}

// TestAnEditedFigureFails: one figure changed by hand in any rendered block of any README is
// caught.
func TestAnEditedFigureFails(t *testing.T) {
	root := prereq.RepoRoot(t)
	edited := 0
	for name, blocks := range wantBlocks {
		b, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		for _, block := range blocks {
			start := strings.Index(string(b), "<!-- generated: "+block)
			end := strings.Index(string(b), "<!-- end generated: "+block)
			if start < 0 || end < start {
				t.Fatalf("%s has no block %s", name, block)
			}
			// Change the first digit of the block's body.
			body := start + strings.Index(string(b[start:]), "\n")
			loc := regexp.MustCompile(`[0-9]`).FindIndex(b[body:end])
			if loc == nil {
				t.Logf("%s: block %s holds no figure yet", name, block)
				continue
			}
			changed := []byte(string(b))
			i := body + loc[0]
			changed[i] = '0' + (changed[i]-'0'+1)%10
			rendered, err := Render(root, string(changed))
			if err != nil {
				t.Fatal(err)
			}
			if rendered == string(changed) {
				t.Errorf("%s: a figure of block %s edited by hand went unnoticed", name, block)
			}
			edited++
		}
	}
	if edited == 0 {
		t.Fatal("no generated block holds a figure: nothing was tried")
	}
}

func TestParseBenchMeansPerCPU(t *testing.T) {
	res, err := ParseBench(strings.NewReader(`goos: linux
BenchmarkConvertReview/to=v1/handler=widget         	       4	 300000000 ns/op	  54.00 MB/s	 1.90 alloc-B/payload-B
BenchmarkConvertReview/to=v1/handler=widget         	       4	 100000000 ns/op	  54.00 MB/s	 2.10 alloc-B/payload-B
BenchmarkConvertReview/to=v1/handler=widget-2       	       4	 200000000 ns/op	  54.00 MB/s	 1.90 alloc-B/payload-B
PASS
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 || res[0].CPU != 1 || res[0].Runs != 2 || res[0].Metrics["ns/op"] != 2e8 || res[0].Metrics["alloc-B/payload-B"] != 2 || res[1].CPU != 2 {
		t.Errorf("ParseBench = %+v", res)
	}
}

func firstDifference(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range max(len(al), len(bl)) {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			return "line " + itoa(i+1) + ":\n  README:  " + x + "\n  report:  " + y
		}
	}
	return ""
}

func itoa(i int) string { return strconv.Itoa(i) }
