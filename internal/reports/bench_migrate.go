package reports

import (
	"fmt"
	"strings"
)

// MigrateBenchFile is the raw output of BenchmarkReencode (make bench writes
// bin/bench-migrate.txt and bin/reports/bench-migrate.txt).
const MigrateBenchFile = "bench-migrate.txt"

// migrateVariants are BenchmarkReencode's variants by the key before the first "-" of their
// name (scripts/migrate-bench-ratios.sh matches them the same way), in the table's order.
var migrateVariants = []struct{ key, label, what string }{
	{"a", "a", "this migrator, through the main resource (admission included)"},
	{"a1", "a′", "this migrator, through /status (what `widgetctl migrate` does)"},
	{"b", "b", "naive loop, 8 workers of empty patches, main resource"},
	{"b1", "b′", "naive loop, through /status"},
	{"c", "c", "kube-storage-version-migrator, PUT as listed, QPS 40/burst 1000"},
	{"d", "d", "Cluster API crdmigrator, one patch at a time, QPS 100/burst 200, main resource"},
	{"d1", "d′", "Cluster API crdmigrator, through /status"},
	{"e", "e", "in-tree StorageVersionMigration (kube-controller-manager)"},
}

// migrateRatios are the ratios the table prints: a/b and a′/b′ compare the migrator with the
// naive loop on the same path and have targets; the others are information (see
// scripts/migrate-bench-ratios.sh for why a/d has none).
var migrateRatios = []struct {
	x, y   string
	target float64 // 0: information
	what   string
}{
	{"a", "b", 0.9, "same path: the main resource"},
	{"a1", "b1", 1.0, "same path: /status"},
	{"a", "c", 0, "same path: the main resource"},
	{"a", "d", 0, "same path: the main resource"},
	{"a1", "d1", 0, "same path: /status"},
	{"a1", "c", 0, "a′ through /status, c through the main resource"},
	{"a1", "d", 0, "a′ through /status, d through the main resource"},
	{"a", "e", 0, "e includes kube-controller-manager's pick-up"},
}

// MigrateTable renders BenchmarkReencode's results: every variant's mean objects/s, the
// apiserver's p99 and the AdmissionReviews per object it caused, then the ratios, each target
// met in bold. Every variant must have re-encoded the same number of objects.
func MigrateTable(results []BenchResult) (string, error) {
	byKey := map[string]BenchResult{}
	for _, r := range results {
		v, ok := strings.CutPrefix(r.Name, "BenchmarkReencode/variant=")
		if !ok {
			continue
		}
		key, _, _ := strings.Cut(v, "-")
		if _, dup := byKey[key]; dup {
			return "", fmt.Errorf("BenchmarkReencode: two variants named %s", key)
		}
		byKey[key] = r
	}
	if len(byKey) == 0 {
		return "", fmt.Errorf("no BenchmarkReencode results")
	}
	objects, err := oneSize(results, "BenchmarkReencode/", "objects")
	if err != nil {
		return "", err
	}
	for _, need := range []string{"a", "a1", "b", "b1", "c", "d"} {
		if _, ok := byKey[need]; !ok {
			return "", fmt.Errorf("BenchmarkReencode: variant %s is missing (the README publishes a, a′, b, b′, c and d)", need)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%.0f Widgets re-encoded after the storage flip, every variant on the same objects against the same apiserver.\n\n", objects)
	b.WriteString("| variant | client and path | objects/s | apiserver p99 | admission reviews / object | runs |\n| --- | --- | ---: | ---: | ---: | ---: |\n")
	for _, v := range migrateVariants {
		r, ok := byKey[v.key]
		if !ok {
			continue
		}
		fmt.Fprintf(&b, "| %s | %s | %.1f | %.0f ms | %.2f | %d |\n", v.label, v.what,
			r.Metrics["objects/s"], r.Metrics["apiserver-p99-ms"], r.Metrics["admission-reviews/object"], r.Runs)
	}
	b.WriteString("\n| ratio | value | target |\n| --- | ---: | --- |\n")
	label := map[string]string{}
	for _, v := range migrateVariants {
		label[v.key] = v.label
	}
	for _, q := range migrateRatios {
		x, okX := byKey[q.x]
		y, okY := byKey[q.y]
		if !okX || !okY || y.Metrics["objects/s"] == 0 {
			continue
		}
		ratio := x.Metrics["objects/s"] / y.Metrics["objects/s"]
		cell, target := fmt.Sprintf("%.2f", ratio), "information ("+q.what+")"
		if q.target > 0 {
			cell, target = metTarget(ratio >= q.target, cell), fmt.Sprintf("≥ %.1f (%s)", q.target, q.what)
		}
		fmt.Fprintf(&b, "| %s/%s | %s | %s |\n", label[q.x], label[q.y], cell, target)
	}
	return b.String(), nil
}
