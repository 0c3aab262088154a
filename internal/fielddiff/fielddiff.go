// Package fielddiff compares two JSON documents field by field and names every path where they
// differ, telling a missing field from null, from an empty list and from an empty map. A
// conversion that turns an empty list into a missing one changes what a client reads back
// (v1alpha1 keeps the two apart with omitzero for that reason), and equality.Semantic calls
// them equal, so verify, backups and the round trip compare with this instead.
package fielddiff

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// absent stands for a field that is not there.
const absent = "(absent)"

// Diff returns "path: a != b" for every difference between a and b, as decoded from JSON
// (map[string]any, []any, string, bool, nil and numbers of any Go type), sorted by path.
func Diff(a, b any) []string {
	var out []string
	walk("", a, b, true, true, &out)
	slices.Sort(out)
	return out
}

// JSON decodes two JSON documents and diffs them.
func JSON(a, b []byte) ([]string, error) {
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		return nil, fmt.Errorf("the first document: %w", err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		return nil, fmt.Errorf("the second document: %w", err)
	}
	return Diff(x, y), nil
}

// Of diffs two values by their JSON encoding (typed objects included).
func Of(a, b any) ([]string, error) {
	x, err := json.Marshal(a)
	if err != nil {
		return nil, err
	}
	y, err := json.Marshal(b)
	if err != nil {
		return nil, err
	}
	return JSON(x, y)
}

func walk(path string, a, b any, hasA, hasB bool, out *[]string) {
	if !hasA || !hasB {
		*out = append(*out, fmt.Sprintf("%s: %s != %s", orRoot(path), show(a, hasA), show(b, hasB)))
		return
	}
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok {
			break
		}
		for _, k := range slices.Sorted(maps.Keys(mergeKeys(x, y))) {
			va, inA := x[k]
			vb, inB := y[k]
			walk(join(path, k), va, vb, inA, inB, out)
		}
		return
	case []any:
		y, ok := b.([]any)
		if !ok {
			break
		}
		for i := range max(len(x), len(y)) {
			var va, vb any
			if i < len(x) {
				va = x[i]
			}
			if i < len(y) {
				vb = y[i]
			}
			walk(path+"["+strconv.Itoa(i)+"]", va, vb, i < len(x), i < len(y), out)
		}
		return
	}
	if !scalarEqual(a, b) {
		*out = append(*out, fmt.Sprintf("%s: %s != %s", orRoot(path), show(a, true), show(b, true)))
	}
}

func mergeKeys(x, y map[string]any) map[string]bool {
	keys := make(map[string]bool, len(x)+len(y))
	for k := range x {
		keys[k] = true
	}
	for k := range y {
		keys[k] = true
	}
	return keys
}

// scalarEqual compares leaves; numbers by value whatever their Go type (JSON decodes them as
// float64, unstructured objects as int64).
func scalarEqual(a, b any) bool {
	fa, aNum := number(a)
	fb, bNum := number(b)
	if aNum || bNum {
		return aNum && bNum && fa == fb
	}
	switch a.(type) {
	case map[string]any, []any:
		return false // a container against a scalar or the other kind of container
	}
	switch b.(type) {
	case map[string]any, []any:
		return false
	}
	return a == b
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, true
	case float32:
		return float64(n), true
	case int:
		return float64(n), true
	case int32:
		return float64(n), true
	case int64:
		return float64(n), true
	case json.Number:
		f, err := n.Float64()
		return f, err == nil
	}
	return 0, false
}

func show(v any, present bool) string {
	if !present {
		return absent
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	s := string(b)
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return s
}

func join(path, key string) string {
	if strings.ContainsAny(key, ".[]") {
		key = "[" + strconv.Quote(key) + "]"
		return path + key
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

func orRoot(path string) string {
	if path == "" {
		return "(document)"
	}
	return path
}
