package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestLabelled: every series gathered gets process="controller", a series that names its
// process already is left out rather than exported twice, and what the registry reports stays
// as it was.
func TestLabelled(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	running := prometheus.NewGauge(prometheus.GaugeOpts{Name: "widget_controller_running", Help: "h"})
	running.Set(1)
	byProcess := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "own_process", Help: "h"}, []string{"process"})
	byProcess.WithLabelValues("webhook").Set(2)
	reg.MustRegister(running, byProcess)

	labelled := Labelled(reg, "process", "controller")
	want := `# HELP widget_controller_running h
# TYPE widget_controller_running gauge
widget_controller_running{process="controller"} 1
`
	if err := testutil.GatherAndCompare(labelled, strings.NewReader(want), "widget_controller_running", "own_process"); err != nil {
		t.Error(err)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`# HELP widget_controller_running h
# TYPE widget_controller_running gauge
widget_controller_running 1
`), "widget_controller_running"); err != nil {
		t.Errorf("the registry itself changed: %v", err)
	}
}
