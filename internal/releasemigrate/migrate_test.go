package releasemigrate

import (
	"strings"
	"testing"

	releasev1 "helm.sh/helm/v4/pkg/release/v1"

	"github.com/widgetry/widget-operator/internal/helmmanifest"
)

const manifest = `---
# Source: app/templates/cm.yaml
apiVersion: v1
kind: ConfigMap
metadata:
  name: cfg
---
# Source: app/templates/widget.yaml
apiVersion: widgetry.io/v1alpha1
kind: Widget
metadata:
  name: web
  labels:
    app: web
spec:
  image: srv:1
  replicas: 2
  timeoutSeconds: 45
  endpoints:
  - name: http
    port: 8080
  - name: admin
    port: 9090
`

// A v1alpha1 Widget in a stored manifest becomes the same Widget through v1, converted by this
// build (replicas to size, seconds to a duration, the endpoints' order kept in the conversion
// annotation); the other documents and the sources stay as they were.
func TestRewrite(t *testing.T) {
	got, changes, err := Rewrite(&releasev1.Release{Name: "app", Namespace: "apps", Version: 3, Manifest: manifest})
	if err != nil {
		t.Fatal(err)
	}
	if len(changes) != 1 || changes[0].Object != "web" || changes[0].Source != "app/templates/widget.yaml" || changes[0].Revision != 3 {
		t.Fatalf("changes: %+v", changes)
	}
	docs, err := helmmanifest.Split(got)
	if err != nil {
		t.Fatal(err)
	}
	w := docs[1]
	spec, _ := w.Object["spec"].(map[string]any)
	if w.APIVersion() != "widgetry.io/v1" || w.Source != "app/templates/widget.yaml" || spec["size"] != float64(2) || spec["timeout"] != "45s" || spec["replicas"] != nil ||
		!strings.Contains(w.Body, "widgetry.io/v1alpha1-endpoint-order: http,admin") || strings.Contains(w.Body, "status") || strings.Contains(w.Body, "creationTimestamp") {
		t.Errorf("the rewritten Widget:\n%s", w.Body)
	}
	if !strings.HasPrefix(got, strings.SplitN(manifest, "---\n# Source: app/templates/widget.yaml", 2)[0]) {
		t.Errorf("the ConfigMap's document changed:\n%s", got)
	}
	// Nothing to do: the manifest comes back as it was.
	if again, changes, err := Rewrite(&releasev1.Release{Manifest: got}); err != nil || len(changes) != 0 || again != got {
		t.Errorf("a second rewrite: %d changes, %v", len(changes), err)
	}
	// A field v1alpha1 does not know is refused, naming the Widget and its template.
	bad := strings.Replace(manifest, "  image: srv:1\n", "  image: srv:1\n  colour: red\n", 1)
	if _, _, err := Rewrite(&releasev1.Release{Version: 3, Manifest: bad}); err == nil || !strings.Contains(err.Error(), "Widget web (app/templates/widget.yaml)") || !strings.Contains(err.Error(), "colour") {
		t.Errorf("an unknown field: %v", err)
	}
}
