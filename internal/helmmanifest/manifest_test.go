package helmmanifest

import (
	"strings"
	"testing"
)

const stored = `---
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
  namespace: apps
spec:
  image: srv:1
`

// A stored manifest splits into its documents with their sources and joins back to the same
// text.
func TestSplitJoin(t *testing.T) {
	docs, err := Split(stored)
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) != 2 || docs[1].Source != "app/templates/widget.yaml" || docs[1].APIVersion() != "widgetry.io/v1alpha1" ||
		docs[1].Kind() != "Widget" || docs[1].Name() != "web" || docs[1].Namespace() != "apps" || docs[0].Name() != "cfg" {
		t.Fatalf("split: %+v", docs)
	}
	if got := Join(docs); got != stored {
		t.Errorf("join:\n%s\nwant:\n%s", got, stored)
	}
	if _, err := Split(stored + "---\n# Source: app/templates/bad.yaml\nkind: [\n"); err == nil || !strings.Contains(err.Error(), "app/templates/bad.yaml") {
		t.Errorf("a damaged document: %v", err)
	}
}
