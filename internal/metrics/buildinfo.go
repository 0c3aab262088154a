package metrics

import (
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// BuildInfoName is the build information metric's name.
const BuildInfoName = "widget_build_info"

// NewBuildInfoCollector returns widget_build_info{version,go_version} 1. An empty version falls
// back to the main module's version from the binary's build information, then to "unknown".
func NewBuildInfoCollector(version string) prometheus.Collector {
	if version == "" {
		version = "unknown"
		if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			version = bi.Main.Version
		}
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        BuildInfoName,
		Help:        "Build information of the running widget-manager, value 1.",
		ConstLabels: prometheus.Labels{"version": version, "go_version": runtime.Version()},
	})
	g.Set(1)
	return g
}
