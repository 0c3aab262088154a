package monitoring

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

// RulesPath is where the generated rules file lives, relative to the repository root.
const RulesPath = "dashboards/prometheus/widget-operator.rules.yaml"

// Files returns every generated file by path relative to the repository root.
func Files(cfg Config) (map[string][]byte, error) {
	rules, err := RulesYAML(cfg)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{RulesPath: rules}
	ds, err := DashboardsFor(cfg)
	if err != nil {
		return nil, err
	}
	for name, j := range ds {
		files[filepath.Join("dashboards", name)] = j
	}
	return files, nil
}

// WriteFiles writes files under root, creating directories as needed.
func WriteFiles(root string, files map[string][]byte) error {
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil { //nolint:gosec // G301: a directory of the source tree, readable like the rest of it
			return fmt.Errorf("create the directory of %s: %w", p, err)
		}
		if err := os.WriteFile(full, files[p], 0o644); err != nil {
			return fmt.Errorf("write %s: %w", p, err)
		}
	}
	return nil
}
