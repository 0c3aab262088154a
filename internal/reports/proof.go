// Package reports holds the figures the READMEs publish. Tests and benchmarks write reports
// (bin/reports, or $WIDGET_REPORTS_DIR); `make reports` copies them into data/ and renders the
// READMEs' generated blocks from those committed files, and a unit test fails when a block
// differs from what its committed report renders. No figure in a README is typed by hand.
package reports

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// ProofFile is the production proof's report, under the reports directory and data/.
const ProofFile = "production-proof.json"

// Proof is what TestProductionProof measured: its steps in the order they ran.
type Proof struct {
	// Date is when the run ended (RFC 3339, UTC).
	Date string `json:"date"`
	// Machine says where it ran: cores and platform, read by the test.
	Machine string `json:"machine"`
	// RatePerSecond is the load's open-loop request rate.
	RatePerSecond int         `json:"ratePerSecond"`
	Steps         []ProofStep `json:"steps"`
	Total         ProofTotal  `json:"total"`
}

// Load is what the load saw over a stretch of time: requests as the client counted them and
// round trips at the transport (under client-go's retries), failures of each, and latency.
type Load struct {
	Seconds           float64 `json:"seconds"`
	Requests          int     `json:"requests"`
	TransportRequests int     `json:"transportRequests"`
	Failed            int     `json:"failed"`
	TransportFailed   int     `json:"transportFailed"`
	P99Ms             float64 `json:"p99Ms"`
	WorstMs           float64 `json:"worstMs"`
}

// ProofStep is one step of the proof and the figures it measured beside the load.
type ProofStep struct {
	Name string `json:"name"`
	Load
	Figures []Figure `json:"figures,omitempty"`
}

// Figure is one measured value of a step, already formatted, with what it is.
type Figure struct {
	Label string `json:"label"`
	Value string `json:"value"`
}

// ProofTotal is the whole run's load and the warnings it received.
type ProofTotal struct {
	Load
	DeprecationWarnings int `json:"deprecationWarnings"`
	ZeroReplicaWarnings int `json:"zeroReplicaWarnings"`
	OtherWarnings       int `json:"otherWarnings"`
}

// Dir is where tests write their reports: $WIDGET_REPORTS_DIR, else bin/reports under root.
func Dir(root string) string {
	if d := os.Getenv("WIDGET_REPORTS_DIR"); d != "" {
		return d
	}
	return filepath.Join(root, "bin", "reports")
}

// WriteProof writes p as JSON and as the text Proof.Text renders (same name, .txt) to dir.
func WriteProof(dir string, p Proof) error {
	if err := writeJSON(dir, ProofFile, p); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, strings.TrimSuffix(ProofFile, ".json")+".txt"), []byte(p.Text()), 0o644)
}

// ReadProof reads a report WriteProof wrote.
func ReadProof(path string) (Proof, error) {
	p, err := readJSON[Proof](path)
	if err != nil {
		return p, err
	}
	if len(p.Steps) == 0 {
		return p, fmt.Errorf("%s: no steps", path)
	}
	return p, nil
}

// ms formats milliseconds for a table.
func ms(v float64) string {
	if v >= 1000 {
		return fmt.Sprintf("%.1f s", v/1000)
	}
	return fmt.Sprintf("%.0f ms", v)
}

// Text renders the report as a fixed-width table: one line per step, its figures indented
// under it, then the total.
func (p Proof) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "production proof, %s, %d requests/s through v1alpha1, %s\n", p.Machine, p.RatePerSecond, p.Date)
	fmt.Fprintf(&b, "%-72s %6s %8s %7s %6s %8s %8s\n", "step", "time", "requests", "(trans)", "failed", "p99", "worst")
	line := func(name string, l Load) {
		fmt.Fprintf(&b, "%-72s %6s %8d %7d %6s %8s %8s\n", name, (time.Duration(l.Seconds * float64(time.Second))).Round(time.Second).String(), l.Requests, l.TransportRequests,
			fmt.Sprintf("%d/%d", l.Failed, l.TransportFailed), ms(l.P99Ms), ms(l.WorstMs))
	}
	for _, s := range p.Steps {
		line(s.Name, s.Load)
		for _, f := range s.Figures {
			fmt.Fprintf(&b, "    %s: %s\n", f.Label, f.Value)
		}
	}
	line("total", p.Total.Load)
	fmt.Fprintf(&b, "warnings: %d v1alpha1 deprecation, %d zero-replica, %d other\n", p.Total.DeprecationWarnings, p.Total.ZeroReplicaWarnings, p.Total.OtherWarnings)
	return b.String()
}
