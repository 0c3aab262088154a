package chart

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
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
	}
	for name, helm := range helms(t) {
		for _, tt := range tests {
			t.Run(name+"/"+tt.name, func(t *testing.T) {
				_, err := Render(RenderOptions{Helm: helm, Chart: chartDir, Values: tt.values})
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

// TestSchemaCoversValues: every documented value is typed in values.schema.json, every
// object in the schema is closed (additionalProperties false or typed), and the schema has
// no value values.yaml lacks.
func TestSchemaCoversValues(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(chartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var schema map[string]any
	if err := json.Unmarshal(raw, &schema); err != nil {
		t.Fatal(err)
	}
	valuesYAML, err := os.ReadFile(filepath.Join(root, ValuesPath))
	if err != nil {
		t.Fatal(err)
	}
	vals, err := Values(valuesYAML)
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, v := range vals {
		documented[v.Path] = true
		s := schema
		for _, p := range strings.Split(v.Path, ".") {
			props, _ := s["properties"].(map[string]any)
			next, ok := props[p].(map[string]any)
			if !ok {
				t.Errorf("values.schema.json lacks %s", v.Path)
				break
			}
			s = next
		}
		if _, typed := s["type"]; !typed && s["anyOf"] == nil {
			t.Errorf("values.schema.json: %s has no type", v.Path)
		}
	}
	var extra []string
	var walk func(prefix string, s map[string]any)
	walk = func(prefix string, s map[string]any) {
		props, ok := s["properties"].(map[string]any)
		if !ok {
			return
		}
		if s["additionalProperties"] != false {
			t.Errorf("values.schema.json: %q allows unknown keys", prefix)
		}
		for k, sub := range props {
			p := strings.TrimPrefix(prefix+"."+k, ".")
			if documented[p] {
				continue // a leaf: its inside (resources, issuerRef) is typed, not documented
			}
			if !hasDocumentedUnder(documented, p) && p != "global" {
				extra = append(extra, p)
				continue
			}
			walk(p, sub.(map[string]any))
		}
	}
	walk("", schema)
	sort.Strings(extra)
	if len(extra) > 0 {
		t.Errorf("values.schema.json has values values.yaml lacks: %v", extra)
	}
}

func hasDocumentedUnder(documented map[string]bool, prefix string) bool {
	for p := range documented {
		if strings.HasPrefix(p, prefix+".") {
			return true
		}
	}
	return false
}
