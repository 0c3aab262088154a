//go:build envtest

package chart

import (
	"strings"
	"testing"

	"github.com/widgetry/widget-operator/internal/chart/helmtemplate"
)

// TestSchemaRejects: a typo or a bad type fails helm template (so helm install) with a
// message naming the value, with Helm 3 and Helm 4.
func TestSchemaRejects(t *testing.T) {
	tests := []struct {
		name   string
		values map[string]any
		want   []string
	}{
		{"typo at the top", set("replicaCont", 2), []string{"replicaCont"}},
		{"typo in a section", set("apiUpgrade.stag", "migrate"), []string{"/apiUpgrade", "stag"}},
		{"unknown stage", set("apiUpgrade.stage", "flip"), []string{"/apiUpgrade/stage", "initial", "unserve"}},
		{"bad type", set("replicaCount", "two"), []string{"/replicaCount"}},
		{"zero replicas", set("replicaCount", 0), []string{"/replicaCount"}},
		{"bad duration", set("certManager.duration", "90 days"), []string{"/certManager/duration"}},
		{"issuerRef without a name", set("certManager.issuerRef", map[string]any{"kind": "ClusterIssuer"}), []string{"certManager.issuerRef.name"}},
		{"bad issuer kind", set("certManager.issuerRef", map[string]any{"name": "x", "kind": "Issuers"}), []string{"/certManager/issuerRef/kind"}},
		{"bad pull policy", set("image.pullPolicy", "Sometimes"), []string{"/image/pullPolicy"}},
		{"unknown mutation route", set("webhook.mutation", "both"), []string{"/webhook/mutation", "auto", "policy"}},
	}
	for name, helm := range helms(t) {
		for _, tt := range tests {
			t.Run(name+"/"+tt.name, func(t *testing.T) {
				_, err := helmtemplate.Render(helmtemplate.Options{Helm: helm, Chart: chartDir, Values: tt.values})
				if err == nil {
					t.Fatal("rendered")
				}
				for _, w := range tt.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error lacks %q: %v", w, err)
					}
				}
			})
		}
	}
}
