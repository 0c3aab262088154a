package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/widgetry/widget-operator/internal/migrate"
)

func TestProgressBarOnATerminal(t *testing.T) {
	var errOut bytes.Buffer
	g := &GlobalOptions{Stderr: &errOut, Output: OutputText, StderrIsTerminal: true}
	p := newProgressPrinter(g, newEventLogger(g))
	p.update(migrate.Status{CRD: "widgets.widgetry.io", Total: 1000, Elapsed: 2 * time.Second,
		Counts: migrate.Counts{Migrated: 480, Conflict: 15, NotFound: 5}, DoneThisRun: 500})
	p.finish()
	want := "\r[###############...............] 500/1000  50%  250 obj/s  conflicts 15  not found 5  errors 0  ETA 2s\x1b[K"
	if got := errOut.String(); !strings.HasPrefix(got, want) || !strings.HasSuffix(got, "\n") {
		t.Errorf("bar %q, want %q then a newline", got, want)
	}
}
