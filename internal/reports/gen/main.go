// Command gen publishes the reports: it copies what the last test and benchmark runs wrote
// (bin/reports, or -from) into internal/reports/data and renders the READMEs' generated blocks
// from those committed files. Run from the repository root: go run ./internal/reports/gen
// (make reports). With -from "" it only renders.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/widgetry/widget-operator/internal/reports"
)

func main() {
	root := flag.String("root", ".", "repository root")
	from := flag.String("from", reports.Dir("."), "directory of fresh reports to copy into "+reports.DataDir+` first ("" to only render)`)
	flag.Parse()
	if *from != "" {
		copied, err := reports.Collect(*root, *from)
		if err != nil {
			fmt.Fprintln(os.Stderr, "reports: copying fresh reports:", err)
			os.Exit(1)
		}
		for _, name := range copied {
			fmt.Printf("reports: %s/%s from %s\n", reports.DataDir, name, *from)
		}
	}
	if err := reports.UpdateREADMEs(*root); err != nil {
		fmt.Fprintln(os.Stderr, "reports: rendering the READMEs:", err)
		os.Exit(1)
	}
}
