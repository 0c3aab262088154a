package reports

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// RestartBenchFile is BenchmarkControllerRestartAtScale at 10,000 Widgets (make bench), and
// RestartBench100kFile the same at 100,000 (make test-long); one run each.
const (
	RestartBenchFile     = "bench-restart.txt"
	RestartBench100kFile = "bench-restart-100k.txt"
)

// RestartSettledRSSMiB bounds the controller process's resident memory once it has taken over
// the fleet and settled: the chart's 256Mi limit of the controller container.
const RestartSettledRSSMiB = 256

// OnceSlack bounds the reconciles per created Widget: each once, and a conflict retried now
// and then.
const OnceSlack = 1.01

// restartRows are the figures of the restart table, in the order the benchmark takes them.
var restartRows = []struct{ unit, what, format, target string }{
	{"populate-s", "creating the fleet, every Widget reconciled (16 workers)", "%.0f s", ""},
	{"create-reconciles/widget", "reconciles per created Widget", "%.3f", "once"},
	{"restart-s", "a new controller process: every Widget reconciled once", "%.0f s", ""},
	{"reconciles-per-s", "… reconciles per second", "%.0f", ""},
	{"restart-writes", "… writes to Widgets and children meanwhile", "%.0f", "none"},
	{"rss-settled-MiB", "resident memory once settled (below 5% of a core)", "%.0f MiB", "settled"},
	{"rss-anon-settled-MiB", "… of which anonymous (its executable's pages are the rest)", "%.0f MiB", ""},
	{"rss-peak-MiB", "… at its highest (sampled every second)", "%.0f MiB", ""},
	{"heap-live-MiB", "live heap once settled", "%.0f MiB", ""},
}

// RestartTable renders BenchmarkControllerRestartAtScale, one column per fleet size (each
// given run is one size), each target met in bold.
func RestartTable(runs ...[]BenchResult) (string, error) {
	const name = "BenchmarkControllerRestartAtScale"
	var cols []BenchResult
	for _, results := range runs {
		var run *BenchResult
		for i, r := range results {
			if strings.HasPrefix(r.Name, name) {
				if run != nil {
					return "", fmt.Errorf("%s: two results in one report (%q and %q)", name, run.Name, r.Name)
				}
				run = &results[i]
			}
		}
		if run == nil {
			return "", fmt.Errorf("no %s results", name)
		}
		if _, err := oneSize(results, name, "widgets"); err != nil {
			return "", err
		}
		if run.Runs != 1 {
			return "", fmt.Errorf("%s: %d runs of %.0f Widgets, want the one run -benchtime 1x -count 1 makes", name, run.Runs, run.Metrics["widgets"])
		}
		cols = append(cols, *run)
	}
	var b strings.Builder
	b.WriteString("| figure |")
	sep := "| --- |"
	for _, c := range cols {
		fmt.Fprintf(&b, " %s Widgets |", thousands(c.Metrics["widgets"]))
		sep += " ---: |"
	}
	b.WriteString(" target |\n" + sep + " --- |\n")
	for _, row := range restartRows {
		fmt.Fprintf(&b, "| %s |", row.what)
		target := ""
		for _, c := range cols {
			v, ok := c.Metrics[row.unit]
			if !ok {
				return "", fmt.Errorf("%s at %.0f Widgets: no %s in the results", name, c.Metrics["widgets"], row.unit)
			}
			cell := fmt.Sprintf(row.format, v)
			switch row.target {
			case "once":
				// Once each; a conflict retried now and then (another writer, a stale read) is
				// the controller working as it should.
				cell, target = metTarget(v <= OnceSlack, cell), fmt.Sprintf("1 (≤ %.2f)", OnceSlack)
			case "none":
				cell, target = metTarget(v == 0, cell), "0"
			case "settled":
				cell, target = metTarget(v <= RestartSettledRSSMiB, cell), fmt.Sprintf("≤ %d MiB", RestartSettledRSSMiB)
			}
			fmt.Fprintf(&b, " %s |", cell)
		}
		fmt.Fprintf(&b, " %s |\n", target)
	}
	if len(cols) > 1 {
		// What memory grows by with the fleet: from the smallest run to the largest, the
		// sizing rule for collections in between and beyond.
		first, last := cols[0], cols[len(cols)-1]
		per := (last.Metrics["widgets"] - first.Metrics["widgets"]) / 10000
		if per <= 0 {
			return "", fmt.Errorf("%s: the runs are not in growing size (%.0f, then %.0f Widgets)", name, first.Metrics["widgets"], last.Metrics["widgets"])
		}
		fmt.Fprintf(&b, "| each further 10,000 Widgets add: resident memory / live heap | %.1f MiB / %.1f MiB |%s  |\n",
			(last.Metrics["rss-settled-MiB"]-first.Metrics["rss-settled-MiB"])/per, (last.Metrics["heap-live-MiB"]-first.Metrics["heap-live-MiB"])/per,
			strings.Repeat("  |", len(cols)-1))
	}
	return b.String(), nil
}

// restartBlock renders the restart table from the committed reports: the 10,000-Widget run
// (make bench), and beside it the 100,000-Widget run (make test-long) once one is published.
func restartBlock(root string) (string, error) {
	var runs [][]BenchResult
	for _, file := range []string{RestartBenchFile, RestartBench100kFile} {
		res, err := ReadBench(filepath.Join(root, DataDir, file))
		if os.IsNotExist(err) && file == RestartBench100kFile {
			table, err := RestartTable(runs...)
			return table + "\nNo run at 100,000 Widgets has been published yet: `make test-long` writes it, and `make reports` publishes it.\n", err
		}
		if err != nil {
			return "", err
		}
		runs = append(runs, res)
	}
	return RestartTable(runs...)
}

// thousands writes a whole number with commas: 100000 → "100,000".
func thousands(v float64) string {
	s := fmt.Sprintf("%.0f", v)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
