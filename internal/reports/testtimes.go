package reports

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// TestTimesFile is the wall times of the last make test in which every tier ran and passed
// (scripts/test.sh writes it).
const TestTimesFile = "make-test.json"

// TestTimes is what scripts/test.sh records.
type TestTimes struct {
	Date    string `json:"date"`
	Machine string `json:"machine"`
	Tiers   []struct {
		Name    string `json:"name"`
		Seconds int    `json:"seconds"`
	} `json:"tiers"`
}

// ReadTestTimes reads a make-test.json.
func ReadTestTimes(path string) (TestTimes, error) {
	tt, err := readJSON[TestTimes](path)
	if err != nil {
		return tt, err
	}
	if len(tt.Tiers) == 0 {
		return tt, fmt.Errorf("%s: no tiers", path)
	}
	return tt, nil
}

// Text renders the wall times as a sentence.
func (tt TestTimes) Text() string {
	total := 0
	var parts []string
	for _, t := range tt.Tiers {
		total += t.Seconds
		parts = append(parts, fmt.Sprintf("%s %d s", t.Name, t.Seconds))
	}
	return fmt.Sprintf("Wall times of the last `make test` whose every tier passed (%s, %s): %d min %d s — %s.\n",
		tt.Machine, tt.Date, total/60, total%60, strings.Join(parts, ", "))
}

// readJSON reads a JSON report into a T; a missing file keeps its os.IsNotExist error, which
// the renderers of reports not yet published look for.
func readJSON[T any](path string) (T, error) {
	var v T
	b, err := os.ReadFile(path)
	if err != nil {
		return v, err
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return v, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

// writeJSON writes v as indented JSON to dir/name, creating dir: what a test or benchmark
// leaves for make reports to publish.
func writeJSON(dir, name string, v any) error {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name), append(b, '\n'), 0o644)
}
