package reports

import (
	"fmt"
	"strings"
)

// ManagerBenchFile is the raw output of BenchmarkManagerAtScale (make bench writes
// bin/bench-manager.txt and bin/reports/bench-manager.txt).
const ManagerBenchFile = "bench-manager.txt"

// Targets BenchmarkManagerAtScale is held to (scripts/bench-ratios.sh prints the same).
const (
	// ManagerSettledRSSMiB bounds the manager's resident memory once it has reconciled every
	// Widget and settled, against the chart's 256Mi limit.
	ManagerSettledRSSMiB = 150
	// ManagerConversionP99Ms bounds a single-object ConversionReview's p99 at 200 requests/s
	// with the fleet in the manager's cache.
	ManagerConversionP99Ms = 5
)

// managerRows are the figures of the manager table, in the order the benchmark takes them.
var managerRows = []struct{ unit, what, format, target string }{
	{"rss-idle-MiB", "resident memory 5 s after it is ready", "%.0f MiB", ""},
	{"rss-created-MiB", "… once every create has returned", "%.0f MiB", ""},
	{"rss-reconciled-MiB", "… once every Widget is reconciled", "%.0f MiB", ""},
	{"rss-settled-MiB", "… once settled (below 5% of a core)", "%.0f MiB", "settled"},
	{"rss-peak-MiB", "… at its highest (sampled every second)", "%.0f MiB", ""},
	{"heap-live-MiB", "live heap once settled", "%.0f MiB", ""},
	{"reconciled-s", "every Widget reconciled after the first create", "%.0f s", ""},
	{"settled-s", "settled after the first create", "%.0f s", ""},
	{"p50-ms", "single-object conversion at 200/s, p50", "%.2f ms", ""},
	{"p99-ms", "… p99", "%.2f ms", "p99"},
	{"max-ms", "… slowest", "%.1f ms", ""},
}

// ManagerTable renders BenchmarkManagerAtScale's one run: the manager's memory at each point
// of reconciling the fleet and its single-object conversion latency afterwards, each target
// met in bold.
func ManagerTable(results []BenchResult) (string, error) {
	var run *BenchResult
	for i, r := range results {
		if strings.HasPrefix(r.Name, "BenchmarkManagerAtScale") {
			if run != nil {
				return "", fmt.Errorf("BenchmarkManagerAtScale: results at two -cpu settings (%d and %d)", run.CPU, r.CPU)
			}
			run = &results[i]
		}
	}
	if run == nil {
		return "", fmt.Errorf("no BenchmarkManagerAtScale results")
	}
	widgets, err := oneSize(results, "BenchmarkManagerAtScale", "widgets")
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%.0f Widgets, each with its Deployment and Service; the manager alone (VmRSS of its process), GOMEMLIMIT as the chart sets it; %s.\n\n",
		widgets, plural(run.Runs, "run"))
	b.WriteString("| figure | value | target |\n| --- | ---: | --- |\n")
	for _, row := range managerRows {
		v, ok := run.Metrics[row.unit]
		if !ok {
			return "", fmt.Errorf("BenchmarkManagerAtScale: no %s in the results", row.unit)
		}
		cell, target := fmt.Sprintf(row.format, v), ""
		switch row.target {
		case "settled":
			cell, target = metTarget(v <= ManagerSettledRSSMiB, cell), fmt.Sprintf("≤ %d MiB", ManagerSettledRSSMiB)
		case "p99":
			cell, target = metTarget(v <= ManagerConversionP99Ms, cell), fmt.Sprintf("≤ %d ms", ManagerConversionP99Ms)
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", row.what, cell, target)
	}
	return b.String(), nil
}

// plural is "1 run", "3 runs".
func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
