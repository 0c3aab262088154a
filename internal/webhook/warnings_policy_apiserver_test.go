//go:build envtest

package webhook_test

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/scheme"
	"github.com/widgetry/widget-operator/internal/testenv"
	"github.com/widgetry/widget-operator/internal/testenv/widgetenv"
)

// TestWarningsPolicy: the chart's warnings policy, on a real apiserver with no pod of ours and
// no webhook at all, warns about risky but legal Widgets in the request version's terms
// (v1alpha1 at initial, v1 at remove: one version served, no conversion), stays silent about
// safe ones and about writes that leave the spec alone, and never refuses.
func TestWarningsPolicy(t *testing.T) {
	long := "sha256:" + strings.Repeat("a", 64)
	cases := map[crd.Stage][]struct {
		name string
		spec map[string]any
		want string // "" for no warning
	}{
		crd.StageInitial: {
			{"no-tag", map[string]any{"image": "registry.example.com/team/server"}, `spec.image: image "registry.example.com/team/server" has no tag and resolves to :latest`},
			{"port-no-tag", map[string]any{"image": "localhost:5000/server"}, "has no tag"},
			{"latest", map[string]any{"image": "server:latest"}, `spec.image: image "server:latest" uses the :latest tag`},
			{"zero", map[string]any{"image": "server:1", "replicas": int64(0)}, "spec.replicas is 0: the Widget runs no pods and its Service has no endpoints"},
			{"slow", map[string]any{"image": "server:1", "timeoutSeconds": int64(600)}, "spec.timeoutSeconds is 600, over 300: slow requests will hold connections that long"},
			{"safe", map[string]any{"image": "localhost:5000/server:v1.2", "timeoutSeconds": int64(300)}, ""},
			{"digest", map[string]any{"image": "server:latest@" + long}, ""},
		},
		crd.StageRemove: {
			{"no-tag", map[string]any{"image": "server"}, `spec.image: image "server" has no tag`},
			{"latest", map[string]any{"image": "registry.example.com/server:latest"}, "uses the :latest tag"},
			{"zero", map[string]any{"image": "server:1", "size": int64(0)}, "spec.size is 0: the Widget runs no pods and its Service has no endpoints"},
			{"slow", map[string]any{"image": "server:1", "timeout": "10m"}, "spec.timeout is 10m, over 5m0s: slow requests will hold connections that long"},
			{"safe", map[string]any{"image": "server:1", "timeout": "5m"}, ""},
			{"digest", map[string]any{"image": "server@" + long}, ""},
		},
	}
	for _, stage := range []crd.Stage{crd.StageInitial, crd.StageRemove} {
		t.Run(string(stage), func(t *testing.T) {
			env := testenv.Start(t, testenv.Options{Scheme: scheme.New()})
			c := crd.Widget()
			if err := crd.ApplyStageFlags(c, stage); err != nil {
				t.Fatal(err)
			}
			env.InstallCRDs(t, c)
			if out, err := env.Kubectl(t, "create", "namespace", widgetenv.Namespace); err != nil {
				t.Fatal(err, out)
			}
			widgetenv.InstallWarningsPolicy(t, env)
			version := "v1alpha1"
			if stage == crd.StageRemove {
				version = "v1"
			}
			wc, seen := warningClient(t, env)
			ctx := context.Background()
			for _, tc := range cases[stage] {
				w := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "widgetry.io/" + version, "kind": "Widget",
					"metadata": map[string]any{"namespace": widgetenv.Namespace, "name": tc.name}, "spec": tc.spec}}
				seen.take()
				if err := wc.Create(ctx, w); err != nil {
					t.Fatalf("%s: a warning must never refuse: %v", tc.name, err)
				}
				got := policyWarnings(seen.take())
				switch {
				case tc.want == "" && got != "":
					t.Errorf("%s: unexpected warnings %q", tc.name, got)
				case tc.want != "" && !strings.Contains(got, tc.want):
					t.Errorf("%s: warnings %q lack %q", tc.name, got, tc.want)
				}
				// A write that leaves the spec alone is not warned again.
				w.SetLabels(map[string]string{"touched": "yes"})
				if err := wc.Update(ctx, w); err != nil {
					t.Fatalf("%s: label update: %v", tc.name, err)
				}
				if got := policyWarnings(seen.take()); got != "" {
					t.Errorf("%s: a label update was warned: %q", tc.name, got)
				}
			}
		})
	}
}

// policyWarnings drops the deprecation warning of v1alpha1, which is the CRD's, not the
// policy's.
func policyWarnings(all string) string {
	var kept []string
	for _, w := range strings.Split(all, "\n") {
		if w != "" && w != crd.DeprecationWarning {
			kept = append(kept, w)
		}
	}
	return strings.Join(kept, "\n")
}
