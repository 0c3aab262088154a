package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/upgrade"
)

// The report of upgrade plan, preflight and apply, printed as text or, with --output json, as
// JSON (writeJSON, which widgetctl verify uses too).

// planReport is the result of plan, preflight and apply.
type planReport struct {
	CRD     string                `json:"crd"`
	From    string                `json:"from"`
	To      crd.Stage             `json:"to"`
	Steps   []upgrade.Step        `json:"steps"`
	Checks  []upgrade.CheckResult `json:"checks,omitempty"`
	Refused string                `json:"refused,omitempty"`
	Applied bool                  `json:"applied,omitempty"`
}

func printPlan(w io.Writer, r *planReport) {
	fmt.Fprintf(w, "CRD %s: %s -> %s\n", r.CRD, r.From, r.To)
	if len(r.Steps) == 0 && r.Refused == "" {
		fmt.Fprintln(w, "Nothing to do: the CRD is at the target stage.")
	}
	for i, s := range r.Steps {
		kind := "forward"
		if s.Rollback {
			kind = "rollback"
		}
		from := string(s.From)
		if from == "" {
			from = "none"
		}
		fmt.Fprintf(w, "%d. %s -> %s (%s)\n   change: %s\n", i+1, from, s.To, kind, s.Change)
		if s.Then != "" {
			fmt.Fprintf(w, "   then:   %s\n", s.Then)
		}
		names := make([]string, len(s.Checks))
		for j, c := range s.Checks {
			names[j] = string(c)
		}
		fmt.Fprintf(w, "   checks: %s\n", strings.Join(names, ", "))
	}
	for _, c := range r.Checks {
		mark := "ok"
		if c.Note != "" {
			mark += ": " + c.Note
		}
		if !c.OK {
			mark = "FAILED: " + c.Error
		}
		fmt.Fprintf(w, "check %-36s %s\n", c.Check, mark)
	}
}

func finish(g *GlobalOptions, r *planReport, err error) error {
	if g.Output == OutputJSON {
		if werr := writeJSON(g.Stdout, r); werr != nil {
			return werr
		}
	} else {
		printPlan(g.Stdout, r)
	}
	return asExit(err)
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
