package reports

import (
	"fmt"
	"strings"
)

// OutageFile is the outage matrix's report (TestOutageWalk), under the reports directory and
// data/.
const OutageFile = "outage-matrix.json"

// OutageMatrix is what the Widget API did for the cluster while parts of ours were gone or
// hung: one row per outage, one cell per kind of request or of the cluster's own work.
type OutageMatrix struct {
	// Date is when the run ended (RFC 3339, UTC).
	Date string `json:"date"`
	// Machine says where it ran: cores and platform, read by the test.
	Machine string `json:"machine"`
	// Stage is the apiUpgrade stage the release was at: it decides which requests need
	// conversion.
	Stage string `json:"stage"`
	// TimeoutSeconds is the webhooks' timeoutSeconds as the chart rendered them.
	TimeoutSeconds int         `json:"timeoutSeconds"`
	Rows           []OutageRow `json:"rows"`
}

// OutageRow is one outage and what each kind of request saw during it.
type OutageRow struct {
	Name  string       `json:"name"`
	Cells []OutageCell `json:"cells"`
}

// OutageCell is one kind of request (or of the cluster's work) during one outage.
type OutageCell struct {
	Column    string `json:"column"`
	Attempts  int    `json:"attempts"`
	Succeeded int    `json:"succeeded"`
	// WorstMs is the slowest attempt, until it answered or, for the cluster's own work, until
	// the work was done or its deadline passed.
	WorstMs float64 `json:"worstMs"`
	// NeedsConversion says the request cannot succeed without the conversion webhook at this
	// stage (it is made through the version that is not the storage version).
	NeedsConversion bool `json:"needsConversion,omitempty"`
	// NotMeasured says why the cell was not measured in this row (the part that does the work
	// is the one that is gone).
	NotMeasured string `json:"notMeasured,omitempty"`
	// FirstError is the first failed attempt's error, shortened.
	FirstError string `json:"firstError,omitempty"`
}

// WriteOutage writes m as JSON to dir.
func WriteOutage(dir string, m OutageMatrix) error {
	return writeJSON(dir, OutageFile, m)
}

// ReadOutage reads a report WriteOutage wrote, refusing one whose rows do not have the same
// columns in the same order (a table could not show it).
func ReadOutage(path string) (OutageMatrix, error) {
	m, err := readJSON[OutageMatrix](path)
	if err != nil {
		return m, err
	}
	if len(m.Rows) == 0 {
		return m, fmt.Errorf("%s: no rows", path)
	}
	for _, r := range m.Rows {
		if len(r.Cells) != len(m.Rows[0].Cells) {
			return m, fmt.Errorf("%s: row %q has %d cells, row %q %d", path, r.Name, len(r.Cells), m.Rows[0].Name, len(m.Rows[0].Cells))
		}
		for i, c := range r.Cells {
			if c.Column != m.Rows[0].Cells[i].Column {
				return m, fmt.Errorf("%s: row %q has column %q where row %q has %q", path, r.Name, c.Column, m.Rows[0].Name, m.Rows[0].Cells[i].Column)
			}
			if c.NotMeasured == "" && (c.Attempts == 0 || c.Succeeded > c.Attempts) {
				return m, fmt.Errorf("%s: row %q, %s: %d of %d attempts succeeded", path, r.Name, c.Column, c.Succeeded, c.Attempts)
			}
		}
	}
	return m, nil
}

// Text renders the matrix as a Markdown table (each cell: the share that succeeded and the
// slowest attempt) and a line on what its marks mean.
func (m OutageMatrix) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "At stage `%s`, webhooks' `timeoutSeconds: %d`, %s, %s. Each cell: the share of attempts that succeeded · the slowest attempt.\n\n", m.Stage, m.TimeoutSeconds, m.Machine, m.Date)
	b.WriteString("| outage |")
	for _, c := range m.Rows[0].Cells {
		fmt.Fprintf(&b, " %s |", c.Column)
	}
	b.WriteString("\n| --- |")
	for range m.Rows[0].Cells {
		b.WriteString(" --- |")
	}
	b.WriteString("\n")
	conversion, notMeasured := false, false
	for _, r := range m.Rows {
		fmt.Fprintf(&b, "| %s |", r.Name)
		for _, c := range r.Cells {
			switch {
			case c.NotMeasured != "":
				notMeasured = true
				b.WriteString(" — ² |")
			default:
				mark := ""
				if c.NeedsConversion {
					conversion = true
					mark = " ¹"
				}
				fmt.Fprintf(&b, " %d %%%s · %s |", c.Succeeded*100/c.Attempts, mark, ms(c.WorstMs))
			}
		}
		b.WriteString("\n")
	}
	if conversion || notMeasured {
		b.WriteString("\n")
	}
	if conversion {
		b.WriteString("¹ needs the conversion webhook at this stage (the request's version is not the storage version): see the conversion outage runbook.  \n")
	}
	if notMeasured {
		b.WriteString("² not measured: the controller does this work, and the controller is what is gone; it is done once a controller leads again.\n")
	}
	return b.String()
}

// HungRow is the name of the row of processes that hang (SIGSTOP); HungText quotes it.
const HungRow = "webhook processes hung (SIGSTOP), controller running"

// HungText says, from the run, what a write through v1 cost while the webhook processes hung
// and while they were gone, for the chart README's choice of timeoutSeconds.
func (m OutageMatrix) HungText() (string, error) {
	cell := func(row, column string) (OutageCell, error) {
		for _, r := range m.Rows {
			if r.Name != row {
				continue
			}
			for _, c := range r.Cells {
				if c.Column == column && c.NotMeasured == "" {
					return c, nil
				}
			}
		}
		return OutageCell{}, fmt.Errorf("the outage matrix has no measured cell %q in row %q", column, row)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Measured by `TestOutageWalk` (%s, %s, `timeoutSeconds: %d`), the slowest of %s:\n\n", m.Date, m.Machine, m.TimeoutSeconds, "its attempts")
	for _, row := range []string{HungRow, m.Rows[0].Name} {
		create, err := cell(row, "create v1")
		if err != nil {
			return "", err
		}
		update, err := cell(row, "update v1")
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "- %s: a create through v1 %s (%d of %d succeeded), an update %s (%d of %d)\n", row,
			ms(create.WorstMs), create.Succeeded, create.Attempts, ms(update.WorstMs), update.Succeeded, update.Attempts)
	}
	return b.String(), nil
}
