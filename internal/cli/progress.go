package cli

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/widgetry/widget-operator/internal/migrate"
)

// progressLogInterval spaces the structured progress lines when stderr is not a terminal
// (a Job's log, CI): frequent enough to show life, rare enough to read.
const progressLogInterval = 5 * time.Second

// barWidth is the number of cells of the progress bar.
const barWidth = 30

// progressPrinter shows a migration's progress: a bar redrawn in place on a terminal,
// structured log lines otherwise.
type progressPrinter struct {
	g       *GlobalOptions
	log     *slog.Logger
	mu      sync.Mutex
	last    migrate.Status
	logged  time.Time
	drawn   bool
	started time.Time
}

func newProgressPrinter(g *GlobalOptions, log *slog.Logger) *progressPrinter {
	return &progressPrinter{g: g, log: log, started: time.Now()}
}

func (p *progressPrinter) update(s migrate.Status) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.last = s
	if p.g.StderrIsTerminal && p.g.Output == OutputText {
		fmt.Fprintf(p.g.Stderr, "\r%s\x1b[K", bar(s))
		p.drawn = true
		return
	}
	if time.Since(p.logged) >= progressLogInterval || s.Finished {
		p.logged = time.Now()
		p.log.Info("migration progress", "crd", s.CRD, "storageVersion", s.StorageVersion, "backend", string(s.Backend),
			"done", s.Counts.Done(), "total", s.Total, "conflicts", s.Counts.Conflict, "notFound", s.Counts.NotFound,
			"errors", s.Counts.Error, "objectsPerSecond", int64(rate(s)), "elapsed", s.Elapsed.Round(time.Second).String())
	}
}

// finish ends the bar's line so the summary starts on its own.
func (p *progressPrinter) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.drawn {
		fmt.Fprintf(p.g.Stderr, "\r%s\x1b[K\n", bar(p.last))
	}
}

func rate(s migrate.Status) float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.DoneThisRun) / s.Elapsed.Seconds()
}

// bar renders e.g. "[#########.....................]  312/1000  31%  280 obj/s  conflicts 0  not found 0  errors 0  ETA 2s".
func bar(s migrate.Status) string {
	done, total := s.Counts.Done(), s.Total
	frac := 0.0
	if total > 0 {
		frac = min(1, float64(done)/float64(total))
	}
	cells := int(frac * barWidth)
	r := rate(s)
	eta := "?"
	if r > 0 && total >= done {
		eta = (time.Duration(float64(total-done)/r) * time.Second).Round(time.Second).String()
	}
	return fmt.Sprintf("[%s%s] %d/%d %3.0f%%  %.0f obj/s  conflicts %d  not found %d  errors %d  ETA %s",
		strings.Repeat("#", cells), strings.Repeat(".", barWidth-cells), done, total, frac*100, r,
		s.Counts.Conflict, s.Counts.NotFound, s.Counts.Error, eta)
}
