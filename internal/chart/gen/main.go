// Command gen writes the chart's generated files: the Widget CRD's versions and stage flags,
// the Grafana dashboards and the README's values table. Run from the repository root:
// go run ./internal/chart/gen
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/widgetry/widget-operator/internal/chart"
	"github.com/widgetry/widget-operator/internal/monitoring"
)

func main() {
	root := flag.String("root", ".", "repository root")
	flag.Parse()
	files, err := chart.Files(*root)
	if err == nil {
		err = monitoring.WriteFiles(*root, files)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "generate the chart's files:", err)
		os.Exit(1)
	}
}
