package chart

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

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
		if closed, isBool := s["additionalProperties"].(bool); !isBool || closed {
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
