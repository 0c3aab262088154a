package monitoring

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"

	"github.com/widgetry/widget-operator/internal/testenv/prereq"
)

// grafanaVariables are replaced by values of the same PromQL type before parsing a dashboard
// query (Grafana substitutes them before sending the query).
var grafanaVariables = strings.NewReplacer(
	"$__rate_interval", "5m",
	"$__interval", "1m",
	"$__range", "1h",
)

var promql = parser.NewParser(parser.Options{})

// parseExpr parses a rule or dashboard expression.
func parseExpr(expr string) (parser.Expr, error) {
	return promql.ParseExpr(grafanaVariables.Replace(expr))
}

// histogramSuffix strips the series suffixes of a classic histogram or summary, so that
// x_bucket, x_count and x_sum all name the catalogued metric x.
var histogramSuffix = regexp.MustCompile(`_(bucket|count|sum)$`)

// metricNames returns the metric names an expression selects, with histogram suffixes removed
// when the stripped name is what the catalogue lists.
func metricNames(t *testing.T, expr string, catalogued map[string]catalogueEntry) []string {
	t.Helper()
	node, err := parseExpr(expr)
	if err != nil {
		t.Fatalf("parse %q: %v", expr, err)
	}
	var names []string
	parser.Inspect(node, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		if name == "" {
			for _, m := range vs.LabelMatchers {
				if m.Name == "__name__" {
					name = m.Value
				}
			}
		}
		if _, ok := catalogued[name]; !ok {
			if base := histogramSuffix.ReplaceAllString(name, ""); base != name {
				if e, ok := catalogued[base]; ok && (e.kind == "histogram" || e.kind == "summary") {
					name = base
				}
			}
		}
		names = append(names, name)
		return nil
	})
	return names
}

// catalogueEntry is one row of the metric catalogue in runbooks/README.md.
type catalogueEntry struct {
	kind, labels, source, meaning string
}

// catalogueRow matches | `name` | type | labels | source | meaning |.
var catalogueRow = regexp.MustCompile("^\\|\\s*`([a-zA-Z_:][a-zA-Z0-9_:]*)`\\s*\\|\\s*([a-z]+)\\s*\\|([^|]*)\\|([^|]*)\\|(.*)\\|\\s*$")

// readCatalogue parses the metric catalogue table.
func readCatalogue(t *testing.T) map[string]catalogueEntry {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(prereq.RepoRoot(t), "runbooks", "README.md"))
	if err != nil {
		t.Fatalf("read the metric catalogue: %v", err)
	}
	entries := map[string]catalogueEntry{}
	for _, line := range strings.Split(string(b), "\n") {
		m := catalogueRow.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		if _, dup := entries[m[1]]; dup {
			t.Errorf("metric catalogue lists %s twice", m[1])
		}
		entries[m[1]] = catalogueEntry{kind: m[2], labels: strings.TrimSpace(m[3]), source: strings.TrimSpace(m[4]), meaning: strings.TrimSpace(m[5])}
	}
	if len(entries) == 0 {
		t.Fatal("runbooks/README.md has no metric catalogue rows (| `name` | type | labels | source | meaning |)")
	}
	return entries
}
