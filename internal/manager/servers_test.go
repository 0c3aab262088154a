package manager

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/widgetry/widget-operator/internal/serving"
)

// TestChartREADMEListenerTable: the chart README's table of listener limits says what the
// code sets.
func TestChartREADMEListenerTable(t *testing.T) {
	readme, err := os.ReadFile("../../charts/widget-operator/README.md")
	if err != nil {
		t.Fatal(err)
	}
	secs := func(d time.Duration) string {
		if d >= time.Minute && d%time.Minute == 0 && d > 2*time.Minute {
			return fmt.Sprintf("%d min", d/time.Minute)
		}
		return fmt.Sprintf("%d s", d/time.Second)
	}
	row := func(name string, l serving.Limits) string {
		return fmt.Sprintf("| %s | %d KiB | %s / %s / %s / %s | %d / %d |", name, l.MaxHeaderBytes>>10,
			secs(l.ReadHeaderTimeout), secs(l.ReadTimeout), secs(l.WriteTimeout), secs(l.IdleTimeout), l.MaxConns, l.MaxConnsPerSource)
	}
	for _, want := range []string{
		row("webhook (9443)", webhookLimits),
		row("metrics (8443)", serving.MetricsLimits),
		row("probes (8081)", serving.ProbeLimits),
		row("pprof (off; loopback)", serving.PprofLimits),
	} {
		if !strings.Contains(string(readme), want+"\n") {
			t.Errorf("the chart README's listener table lacks the row the code sets:\n%s", want)
		}
	}
	if want := fmt.Sprintf("fails authentication or authorization %d times", MetricsAuthFailureBurst); !strings.Contains(string(readme), want) {
		t.Errorf("the chart README does not say %q", want)
	}
}
