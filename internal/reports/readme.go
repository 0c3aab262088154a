package reports

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// DataDir is where the committed reports live, relative to the repository root.
const DataDir = "internal/reports/data"

// READMEs are the files whose generated blocks are rendered from the committed reports.
var READMEs = []string{"README.md", "charts/widget-operator/README.md", "scripts/README.md"}

// A block is a part of a README between
//
//	<!-- generated: NAME (make reports; edit the report, not this block) -->
//	<!-- end generated: NAME -->
//
// whose text is rendered from a committed report.
var blockRE = regexp.MustCompile(`(?s)(<!-- generated: ([a-z0-9-]+) [^>]*-->\n)(.*?)(<!-- end generated: ([a-z0-9-]+) -->)`)

// renderers render each named block from the committed reports under root.
var renderers = map[string]func(root string) (string, error){
	"production-proof": func(root string) (string, error) {
		p, err := ReadProof(filepath.Join(root, DataDir, ProofFile))
		if err != nil {
			return "", err
		}
		return "```text\n" + p.Text() + "```\n", nil
	},
	"make-test-times": reportBlock(TestTimesFile, ReadTestTimes, TestTimes.textOK,
		"No `make test` run has been published yet: run `make reports` after one that passes.\n"),
	"toolchain-build": reportBlock(ToolchainFile, ReadToolchainBuild, ToolchainBuild.textOK,
		"No full build of the toolchain has been published yet: `make reports` publishes the one `make tools` records.\n"),
	"outage-matrix": reportBlock(OutageFile, ReadOutage, OutageMatrix.textOK,
		"No outage matrix has been published yet: run `make reports` after a `make test-e2e` that passes.\n"),
	"outage-hung": reportBlock(OutageFile, ReadOutage, OutageMatrix.HungText,
		"No outage matrix has been published yet: run `make reports` after a `make test-e2e` that passes.\n"),
	"local-cluster": reportBlock(ClusterCostFile, ReadClusterCost, ClusterCost.textOK,
		"No multi-node cluster has been measured yet: run `make reports` after a `make test-e2e` that passes.\n"),
	"bench-list":       benchBlock(ListBenchFile, ListTable),
	"bench-list-100k":  benchBlock(ListBench100kFile, ListTable),
	"bench-conversion": benchBlock(ConversionBenchFile, ConversionTable),
	"bench-manager":    benchBlock(ManagerBenchFile, ManagerTable),
	"bench-migrate":    benchBlock(MigrateBenchFile, MigrateTable),
	"bench-restart":    restartBlock,
}

// reportBlock renders a block from a committed JSON report, read with read and rendered with
// text; before the report's first publication the block says so (missing). Removing a
// published report changes the block, which the README test sees.
func reportBlock[T any](file string, read func(path string) (T, error), text func(T) (string, error), missing string) func(root string) (string, error) {
	return func(root string) (string, error) {
		r, err := read(filepath.Join(root, DataDir, file))
		if os.IsNotExist(err) {
			return missing, nil
		}
		if err != nil {
			return "", err
		}
		return text(r)
	}
}

// textOK adapts the reports' Text, which cannot fail, to reportBlock.
func (tt TestTimes) textOK() (string, error)      { return tt.Text(), nil }
func (tb ToolchainBuild) textOK() (string, error) { return tb.Text(), nil }
func (m OutageMatrix) textOK() (string, error)    { return m.Text(), nil }
func (c ClusterCost) textOK() (string, error)     { return c.Text(), nil }

// benchBlock renders a block from a committed benchmark output with its table function.
func benchBlock(file string, table func([]BenchResult) (string, error)) func(root string) (string, error) {
	return func(root string) (string, error) {
		res, err := ReadBench(filepath.Join(root, DataDir, file))
		if err != nil {
			return "", err
		}
		return table(res)
	}
}

// knownBlocks names every block a README may hold, for the error that names an unknown one.
func knownBlocks() string {
	names := make([]string, 0, len(renderers))
	for name := range renderers {
		names = append(names, name)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// Render returns text with every generated block rendered anew from the committed reports.
// A block naming no known report, or whose end names another, is an error.
func Render(root, text string) (string, error) {
	var errs []string
	out := blockRE.ReplaceAllStringFunc(text, func(block string) string {
		m := blockRE.FindStringSubmatch(block)
		if m[2] != m[5] {
			errs = append(errs, fmt.Sprintf("block %q ends as %q", m[2], m[5]))
			return block
		}
		render, ok := renderers[m[2]]
		if !ok {
			errs = append(errs, fmt.Sprintf("block %q names no report (known: %s)", m[2], knownBlocks()))
			return block
		}
		body, err := render(root)
		if err != nil {
			errs = append(errs, fmt.Sprintf("block %q: %v", m[2], err))
			return block
		}
		return m[1] + body + m[4]
	})
	if len(errs) > 0 {
		return "", fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return out, nil
}

// Blocks names the generated blocks of text, in order.
func Blocks(text string) []string {
	var names []string
	for _, m := range blockRE.FindAllStringSubmatch(text, -1) {
		names = append(names, m[2])
	}
	return names
}

// UpdateREADMEs rewrites every README's generated blocks from the committed reports.
func UpdateREADMEs(root string) error {
	for _, name := range READMEs {
		path := filepath.Join(root, name)
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		out, err := Render(root, string(b))
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if out != string(b) {
			//nolint:gosec // path is a README of this repository, named in READMEs, under the root the developer gave
			if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

// Collect copies into DataDir every report found in from (what the last test and benchmark
// runs wrote), and returns the names it copied.
func Collect(root, from string) ([]string, error) {
	var copied []string
	for _, name := range []string{ProofFile, strings.TrimSuffix(ProofFile, ".json") + ".txt", ConversionBenchFile, ListBenchFile, ListBench100kFile, ManagerBenchFile, MigrateBenchFile, RestartBenchFile, RestartBench100kFile, OutageFile, ClusterCostFile, TestTimesFile, ToolchainFile} {
		b, err := os.ReadFile(filepath.Join(from, name))
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return copied, err
		}
		//nolint:gosec // name is one of the fixed report names above; the file is committed, so world-readable
		if err := os.WriteFile(filepath.Join(root, DataDir, name), b, 0o644); err != nil {
			return copied, err
		}
		copied = append(copied, name)
	}
	return copied, nil
}
