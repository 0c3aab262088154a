package fielddiff

import (
	"slices"
	"testing"
)

func TestJSON(t *testing.T) {
	for _, tc := range []struct {
		name, a, b string
		want       []string
	}{
		{"equal", `{"spec":{"a":[1,{"b":null}],"c":{}}}`, `{"spec":{"c":{},"a":[1,{"b":null}]}}`, nil},
		{"empty list against a missing one", `{"spec":{"endpoints":[]}}`, `{"spec":{}}`, []string{"spec.endpoints: [] != (absent)"}},
		{"empty map against a missing one", `{"spec":{}}`, `{}`, []string{"spec: {} != (absent)"}},
		{"null against a missing field", `{"spec":{"size":null}}`, `{"spec":{}}`, []string{"spec.size: null != (absent)"}},
		{"null against an empty list", `{"a":null}`, `{"a":[]}`, []string{"a: null != []"}},
		{"a changed leaf, with its path", `{"spec":{"endpoints":[{"port":80},{"port":81}]}}`, `{"spec":{"endpoints":[{"port":80},{"port":82}]}}`, []string{"spec.endpoints[1].port: 81 != 82"}},
		{"a longer list", `{"a":[1]}`, `{"a":[1,2]}`, []string{"a[1]: (absent) != 2"}},
		{"a type change", `{"a":"1"}`, `{"a":1}`, []string{`a: "1" != 1`}},
		{"a list against a map", `{"a":[]}`, `{"a":{}}`, []string{"a: [] != {}"}},
		{"keys with dots", `{"metadata":{"annotations":{"widgetry.io/x":"1"}}}`, `{"metadata":{"annotations":{}}}`, []string{`metadata.annotations["widgetry.io/x"]: "1" != (absent)`}},
		{"false against absent", `{"paused":false}`, `{}`, []string{"paused: false != (absent)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := JSON([]byte(tc.a), []byte(tc.b))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
	if _, err := JSON([]byte(`{`), []byte(`{}`)); err == nil {
		t.Error("malformed JSON: no error")
	}
}

func TestNumbersOfAnyType(t *testing.T) {
	if d := Diff(map[string]any{"n": int64(3)}, map[string]any{"n": float64(3)}); d != nil {
		t.Errorf("int64 3 against float64 3: %q", d)
	}
	if d := Diff(map[string]any{"n": int64(3)}, map[string]any{"n": 3.5}); len(d) != 1 {
		t.Errorf("3 against 3.5: %q", d)
	}
}

func TestOf(t *testing.T) {
	type spec struct {
		Endpoints []int `json:"endpoints,omitempty"`
		List      []int `json:"list"`
	}
	d, err := Of(spec{List: []int{}}, spec{})
	if err != nil || !slices.Equal(d, []string{"list: [] != null"}) {
		t.Errorf("typed: %q %v", d, err)
	}
}
