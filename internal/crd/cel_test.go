package crd_test

import (
	"strings"
	"testing"

	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/crd/crdcel"
)

// The CRD refuses a port listed by two endpoints in each version's terms (the apiserver would
// refuse the Service the controller renders from it) and ratchets: an
// update that leaves such endpoints as they were is admitted, as the apiserver admits an
// unchanged value stored before the rule existed.
func TestCRDRefusesAPortListedTwice(t *testing.T) {
	cases := []struct {
		version, dup, distinct string
	}{
		{"v1alpha1",
			`[{"name":"http","port":8080},{"name":"metrics","port":9090},{"name":"web","port":8080}]`,
			`[{"name":"http","port":8080},{"name":"web","port":8081}]`},
		{"v1",
			`{"http":{"port":8080},"metrics":{"port":9090},"web":{"port":8080}}`,
			`{"http":{"port":8080},"web":{"port":8081}}`},
	}
	for _, c := range cases {
		t.Run(c.version, func(t *testing.T) {
			v, err := crdcel.New(crd.Widget(), c.version)
			if err != nil {
				t.Fatal(err)
			}
			widget := func(endpoints, label string) []byte {
				return []byte(`{"apiVersion":"widgetry.io/` + c.version + `","kind":"Widget","metadata":{"name":"w","labels":{"l":"` + label +
					`"}},"spec":{"image":"nginx:1.27","endpoints":` + endpoints + `}}`)
			}
			errs, err := v.Validate(widget(c.dup, "a"), nil)
			if err != nil {
				t.Fatal(err)
			}
			msg := errs.ToAggregate()
			if msg == nil || !strings.Contains(msg.Error(), "spec.endpoints") || !strings.Contains(msg.Error(), "two endpoints list the same port") {
				t.Fatalf("create with a port listed twice: %v", msg)
			}
			if errs, _ := v.Validate(widget(c.distinct, "a"), nil); len(errs) > 0 {
				t.Errorf("distinct ports refused: %v", errs)
			}
			if errs, _ := v.Validate(widget(c.dup, "b"), widget(c.dup, "a")); len(errs) > 0 {
				t.Errorf("an update leaving the stored endpoints alone refused (no ratcheting): %v", errs)
			}
			if errs, _ := v.Validate(widget(c.dup, "b"), widget(c.distinct, "a")); len(errs) == 0 {
				t.Error("an update that lists a port twice admitted")
			}
		})
	}
}
