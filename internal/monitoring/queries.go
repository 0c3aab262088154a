package monitoring

import (
	"encoding/json"
	"fmt"
)

// DashboardQueries returns every PromQL expression of the dashboards, keyed by
// "<dashboard file>: <panel title>", with Grafana's variables ($job, $namespace,
// $__rate_interval) left in.
func DashboardQueries() (map[string][]string, error) {
	ds, err := Dashboards()
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for name, raw := range ds {
		var d struct {
			Panels []struct {
				Title   string `json:"title"`
				Targets []struct {
					Expr string `json:"expr"`
				} `json:"targets"`
			} `json:"panels"`
		}
		if err := json.Unmarshal(raw, &d); err != nil {
			return nil, fmt.Errorf("dashboard %s: %w", name, err)
		}
		for _, p := range d.Panels {
			for _, tg := range p.Targets {
				out[name+": "+p.Title] = append(out[name+": "+p.Title], tg.Expr)
			}
		}
	}
	return out, nil
}
