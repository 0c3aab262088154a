package reports

import (
	"fmt"
	"slices"
	"strings"
)

// ToolchainFile is what the last run of scripts/toolchain.sh that built every tool recorded.
const ToolchainFile = "toolchain-build.json"

// ToolchainBuild is scripts/toolchain.sh's record of a run that built every tool.
type ToolchainBuild struct {
	Date    string `json:"date"`
	Machine string `json:"machine"`
	// GoCache is "cold" when Go's build cache was empty before the run (a fresh machine),
	// "warm" otherwise.
	GoCache string `json:"goCache"`
	Seconds int    `json:"seconds"`
	Tools   []struct {
		Name    string `json:"name"`
		Seconds int    `json:"seconds"`
	} `json:"tools"`
}

// ReadToolchainBuild reads a toolchain-build.json.
func ReadToolchainBuild(path string) (ToolchainBuild, error) {
	tb, err := readJSON[ToolchainBuild](path)
	if err != nil {
		return tb, err
	}
	if len(tb.Tools) == 0 || tb.Seconds <= 0 {
		return tb, fmt.Errorf("%s: no tools or no total", path)
	}
	if tb.GoCache != "cold" && tb.GoCache != "warm" {
		return tb, fmt.Errorf("%s: goCache %q, want cold or warm", path, tb.GoCache)
	}
	return tb, nil
}

// Text renders the build as a sentence: the total and the three slowest tools.
func (tb ToolchainBuild) Text() string {
	tools := slices.Clone(tb.Tools)
	slices.SortStableFunc(tools, func(a, b struct {
		Name    string `json:"name"`
		Seconds int    `json:"seconds"`
	}) int {
		return b.Seconds - a.Seconds
	})
	var slowest []string
	for _, t := range tools[:min(3, len(tools))] {
		slowest = append(slowest, fmt.Sprintf("%s %s", t.Name, minutes(t.Seconds)))
	}
	return fmt.Sprintf("The last full build of the toolchain published took **%s** (%s, Go's build cache %s, %s); the slowest: %s.\n",
		minutes(tb.Seconds), tb.Machine, tb.GoCache, tb.Date, strings.Join(slowest, ", "))
}

func minutes(s int) string {
	if s < 60 {
		return fmt.Sprintf("%d s", s)
	}
	return fmt.Sprintf("%d min %d s", s/60, s%60)
}
