package reports

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// ConversionBenchFile is the raw `go test -bench BenchmarkConvertReview` output the
// conversion table is rendered from (make bench writes bin/bench.txt; make reports copies it).
const ConversionBenchFile = "bench-conversion.txt"

// benchLine is a benchmark result line: name, iterations, then value-unit pairs.
var benchLine = regexp.MustCompile(`^(Benchmark\S+?)(?:-(\d+))?\s+\d+\s+(.*)$`)

// BenchResult is the mean of every run of one benchmark at one -cpu setting.
type BenchResult struct {
	Name    string
	CPU     int
	Runs    int
	Metrics map[string]float64 // unit → mean
}

// ParseBench reads `go test -bench` output and returns the mean of each benchmark per -cpu
// setting, in the order first seen. A name without a -N suffix ran at -cpu 1.
func ParseBench(r io.Reader) ([]BenchResult, error) {
	var order []string
	sums := map[string]*BenchResult{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := benchLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		cpu := 1
		if m[2] != "" {
			cpu, _ = strconv.Atoi(m[2])
		}
		key := fmt.Sprintf("%s@%d", m[1], cpu)
		res, ok := sums[key]
		if !ok {
			res = &BenchResult{Name: m[1], CPU: cpu, Metrics: map[string]float64{}}
			sums[key] = res
			order = append(order, key)
		}
		f := strings.Fields(m[3])
		if len(f)%2 != 0 {
			return nil, fmt.Errorf("benchmark line %q: values and units do not pair", sc.Text())
		}
		for i := 0; i < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, fmt.Errorf("benchmark line %q: %w", sc.Text(), err)
			}
			res.Metrics[f[i+1]] += v
		}
		res.Runs++
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	out := make([]BenchResult, 0, len(order))
	for _, k := range order {
		res := sums[k]
		for u := range res.Metrics {
			res.Metrics[u] /= float64(res.Runs)
		}
		out = append(out, *res)
	}
	return out, nil
}

// ReadBench parses a committed benchmark output file.
func ReadBench(path string) ([]BenchResult, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	res, err := ParseBench(f)
	if err == nil && len(res) == 0 {
		err = fmt.Errorf("%s: no benchmark results", path)
	}
	return res, err
}

// ConversionTable renders BenchmarkConvertReview's results as the README's table: per
// direction and -cpu, the three handlers' mean time, a/b, a/c, and this handler's allocation
// and peak heap per byte of body, with each target met shown in bold.
func ConversionTable(results []BenchResult) (string, error) {
	type key struct {
		dir string
		cpu int
	}
	var rows []key
	cells := map[key]map[string]BenchResult{}
	runs := map[int]bool{}
	for _, r := range results {
		rest, ok := strings.CutPrefix(r.Name, "BenchmarkConvertReview/")
		if !ok {
			continue
		}
		dir, handler, ok := strings.Cut(rest, "/handler=")
		if !ok {
			return "", fmt.Errorf("%s: no handler= part", r.Name)
		}
		k := key{dir, r.CPU}
		if cells[k] == nil {
			cells[k] = map[string]BenchResult{}
			rows = append(rows, k)
		}
		cells[k][handler] = r
		runs[r.Runs] = true
	}
	if len(rows) == 0 {
		return "", fmt.Errorf("no BenchmarkConvertReview results")
	}
	direction := map[string]string{"to=v1": "v1alpha1 → v1", "to=v1alpha1": "v1 → v1alpha1"}
	var b strings.Builder
	b.WriteString("| direction, `-cpu` | (a) this handler | (b) controller-runtime | (c) encoding/json floor | a/b | a/c | (a) allocated / payload | (a) peak heap / body |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, k := range rows {
		a, okA := cells[k]["widget"]
		sb, okB := cells[k]["controller-runtime"]
		c, okC := cells[k]["encoding-json-floor"]
		if !okA || !okB || !okC {
			return "", fmt.Errorf("%s at -cpu %d: a handler's results are missing", k.dir, k.cpu)
		}
		ab := a.Metrics["ns/op"] / sb.Metrics["ns/op"]
		ac := a.Metrics["ns/op"] / c.Metrics["ns/op"]
		abCell := fmt.Sprintf("%.2f", ab)
		if k.cpu == 1 {
			abCell = metTarget(ab <= 0.3, abCell)
		}
		fmt.Fprintf(&b, "| %s, %d | %.0f ms | %.0f ms | %.0f ms | %s | %s | %s | %s |\n", direction[k.dir], k.cpu,
			a.Metrics["ns/op"]/1e6, sb.Metrics["ns/op"]/1e6, c.Metrics["ns/op"]/1e6, abCell,
			metTarget(ac <= 2, fmt.Sprintf("%.2f", ac)),
			metTarget(a.Metrics["alloc-B/payload-B"] <= 3, fmt.Sprintf("%.2f", a.Metrics["alloc-B/payload-B"])),
			metTarget(a.Metrics["peak-heap/body"] <= PeakHeapPerBody, fmt.Sprintf("%.2f", a.Metrics["peak-heap/body"])))
	}
	var counts []string
	for n := range runs {
		counts = append(counts, strconv.Itoa(n))
	}
	fmt.Fprintf(&b, "\nMeans of %s runs each. Targets: a/b ≤ 0.3 at `-cpu 1`, a/c ≤ 2, allocated / payload ≤ 3, peak heap / body ≤ %.1f; bold where met.\n",
		strings.Join(counts, ", "), PeakHeapPerBody)
	return b.String(), nil
}

// PeakHeapPerBody is the conversion handler's claimed bound on its peak heap per byte of
// body, the same one internal/webhook's memory test asserts.
const PeakHeapPerBody = 2.5

// ListBenchFile is the raw output of BenchmarkListThroughConversion (make bench writes
// bin/bench-list.txt and bin/reports/bench-list.txt).
const ListBenchFile = "bench-list.txt"

// ListBench100kFile is the same benchmark at 100,000 Widgets, one run (make test-long writes
// bin/reports/bench-list-100k.txt).
const ListBench100kFile = "bench-list-100k.txt"

// ListTable renders BenchmarkListThroughConversion's results: per LIST shape, the mean time
// of a whole LIST through v1alpha1 and through v1, the stored version, their
// ratio against its target of 1.1, and the ConversionReviews the webhook received per LIST;
// then what it received for a create through each version and for a rebuild of the CRD's
// watch caches.
func ListTable(results []BenchResult) (string, error) {
	type row struct{ v1alpha1, v1 BenchResult }
	var shapes []string
	rows := map[string]*row{}
	for _, r := range results {
		rest, ok := strings.CutPrefix(r.Name, "BenchmarkListThroughConversion/")
		if !ok {
			continue
		}
		shape, version, ok := strings.Cut(rest, "/version=")
		if !ok {
			return "", fmt.Errorf("%s: no version= part", r.Name)
		}
		if rows[shape] == nil {
			rows[shape] = &row{}
			shapes = append(shapes, shape)
		}
		switch version {
		case "v1alpha1":
			rows[shape].v1alpha1 = r
		case "v1":
			rows[shape].v1 = r
		}
	}
	if len(shapes) == 0 {
		return "", fmt.Errorf("no BenchmarkListThroughConversion results")
	}
	widgets, err := oneSize(results, "BenchmarkListThroughConversion/", "widgets")
	if err != nil {
		return "", err
	}
	reviewsOf := func(what string, r BenchResult) (float64, error) {
		v, ok := r.Metrics["reviews/op"]
		if !ok {
			return 0, fmt.Errorf("%s: no reviews/op in the results (a run from before the webhook's review-size metrics)", what)
		}
		return v, nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%.0f Widgets stored as v1; one op is a whole LIST, every page read. Reviews: the ConversionReviews the webhook received during the LISTs through v1alpha1, per LIST, from its own metrics.\n\n", widgets)
	b.WriteString("| LIST | through v1alpha1 | through v1 (stored) | v1alpha1/v1 (target ≤ 1.1) | reviews per LIST | runs |\n| --- | ---: | ---: | ---: | ---: | ---: |\n")
	for _, shape := range shapes {
		if shape == "create" || shape == "rebuild" {
			continue
		}
		r := rows[shape]
		if r.v1alpha1.Runs == 0 || r.v1.Runs == 0 {
			return "", fmt.Errorf("%s: a version's results are missing", shape)
		}
		reviews, err := reviewsOf(shape, r.v1alpha1)
		if err != nil {
			return "", err
		}
		ratio := r.v1alpha1.Metrics["ns/op"] / r.v1.Metrics["ns/op"]
		cell := metTarget(ratio <= 1.1, fmt.Sprintf("%.2f", ratio))
		fmt.Fprintf(&b, "| %s | %.2f s | %.2f s | %s | %.0f | %d |\n", shape, r.v1alpha1.Metrics["ns/op"]/1e9, r.v1.Metrics["ns/op"]/1e9, cell, reviews, r.v1alpha1.Runs)
	}
	create, rebuild := rows["create"], rows["rebuild"]
	if create == nil || rebuild == nil || create.v1alpha1.Runs == 0 || create.v1.Runs == 0 || rebuild.v1alpha1.Runs == 0 {
		return "", fmt.Errorf("the create and rebuild results are missing (a run from before they were measured)")
	}
	b.WriteString("\n| what the webhook received, besides LISTs | reviews | objects per review (largest ≤) | runs |\n| --- | ---: | ---: | ---: |\n")
	for _, c := range []struct {
		what string
		r    BenchResult
	}{{"a create through v1alpha1", create.v1alpha1}, {"a create through v1", create.v1}} {
		reviews, err := reviewsOf("create", c.r)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "| %s | %.1f | %.0f (≤ %.0f) | %d |\n", c.what, reviews, c.r.Metrics["objects/review"], c.r.Metrics["max-review-objects-le"], c.r.Runs)
	}
	reviews, err := reviewsOf("rebuild", rebuild.v1alpha1)
	if err != nil {
		return "", err
	}
	m := rebuild.v1alpha1.Metrics
	fmt.Fprintf(&b, "| the CRD's spec changed: its watch caches rebuilt (%.1f s to the last review; meanwhile a LIST is answered 429, %.1f times per change here) | %.0f | %.0f (≤ %.0f) | %d |\n",
		m["rebuild-s"], m["429/op"], reviews, m["objects/review"], m["max-review-objects-le"], rebuild.v1alpha1.Runs)
	return b.String(), nil
}

// oneSize is the one value of unit (the collection size a table is for) that every result
// named with prefix reports; results of mixed sizes, or without one, cannot make one table.
func oneSize(results []BenchResult, prefix, unit string) (float64, error) {
	sizes := map[float64]bool{}
	for _, r := range results {
		if strings.HasPrefix(r.Name, prefix) {
			sizes[r.Metrics[unit]] = true
		}
	}
	if len(sizes) != 1 || sizes[0] {
		return 0, fmt.Errorf("%s: the results do not name one %s (%v)", strings.TrimSuffix(prefix, "/"), unit, sizes)
	}
	for n := range sizes {
		return n, nil
	}
	return 0, nil // not reached: sizes holds one value
}

// metTarget shows a figure that meets its target in bold and one that misses it as missed.
func metTarget(ok bool, cell string) string {
	if ok {
		return "**" + cell + "**"
	}
	return cell + " (missed)"
}
