// Command gen writes the generated monitoring files: the Prometheus rules and the Grafana
// dashboards. Run from the repository root: go run ./internal/monitoring/gen
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/widgetry/widget-operator/internal/monitoring"
)

func main() {
	cfg := monitoring.DefaultConfig()
	root := flag.String("root", ".", "repository root to write dashboards/ under")
	flag.StringVar(&cfg.Job, "job", cfg.Job, "Prometheus job label of the manager")
	flag.StringVar(&cfg.RunbookBaseURL, "runbook-base-url", cfg.RunbookBaseURL, "base of every alert's runbook_url (<base>/alerts/<AlertName>.md)")
	flag.IntVar(&cfg.ExpectedReplicas, "expected-replicas", cfg.ExpectedReplicas, "manager replicas WidgetOperatorDegraded expects")
	flag.StringVar(&cfg.Certificate, "certificate", cfg.Certificate, "cert-manager Certificate of the webhooks' serving certificate (the chart's <fullname>-serving)")
	helmRules := flag.String("helm-rules", "", "also write the rules as a Helm named template (widget-operator.rules) to this path under root; default "+monitoring.ChartRulesPath+" when the chart's templates directory exists, - for never")
	flag.Parse()
	if *helmRules == "" {
		if st, err := os.Stat(filepath.Join(*root, filepath.Dir(monitoring.ChartRulesPath))); err == nil && st.IsDir() {
			*helmRules = monitoring.ChartRulesPath
		}
	}
	if *helmRules == "-" {
		*helmRules = ""
	}
	files, err := monitoring.Files(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "generate monitoring files:", err)
		os.Exit(1)
	}
	if *helmRules != "" {
		tpl, err := monitoring.RulesHelmTemplate(monitoring.DefaultHelmValues())
		if err != nil {
			fmt.Fprintln(os.Stderr, "generate the Helm rules template:", err)
			os.Exit(1)
		}
		files[*helmRules] = tpl
	}
	if err := monitoring.WriteFiles(*root, files); err != nil {
		fmt.Fprintln(os.Stderr, "write monitoring files:", err)
		os.Exit(1)
	}
}
