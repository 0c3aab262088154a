// Package helmmanifest splits the manifest Helm stores with each release revision into its
// documents, and joins them back, so that the census can find the Widgets a release declares
// and migrate-release can rewrite them without touching anything else.
package helmmanifest

import (
	"fmt"
	"strings"

	"sigs.k8s.io/yaml"
)

// Doc is one document of a stored manifest.
type Doc struct {
	// Source is the template it was rendered from ("# Source: chart/templates/x.yaml"), when
	// Helm recorded it.
	Source string
	// Head is the document's comment lines before the object (the Source line among them).
	Head string
	// Body is the object's YAML as stored.
	Body string
	// Object is Body parsed; nil for an empty document.
	Object map[string]any
}

// APIVersion, Kind, Name and Namespace of the document's object ("" when absent).
func (d *Doc) APIVersion() string { return str(d.Object, "apiVersion") }
func (d *Doc) Kind() string       { return str(d.Object, "kind") }
func (d *Doc) Name() string       { return str(meta(d.Object), "name") }
func (d *Doc) Namespace() string  { return str(meta(d.Object), "namespace") }

func meta(o map[string]any) map[string]any { m, _ := o["metadata"].(map[string]any); return m }

func str(m map[string]any, k string) string { s, _ := m[k].(string); return s }

// Split splits a stored manifest ("---"-separated documents, each after its "# Source:"
// line) into documents. A document that does not parse is an error naming its source: the
// manifest came from Helm, so that is damage, not input to skip.
func Split(manifest string) ([]Doc, error) {
	var docs []Doc
	for _, part := range strings.Split(manifest, "\n---") {
		part = strings.TrimPrefix(strings.TrimPrefix(part, "---"), "\n")
		var head, body []string
		inHead := true
		for _, line := range strings.Split(part, "\n") {
			if inHead && (strings.HasPrefix(line, "#") || strings.TrimSpace(line) == "") {
				head = append(head, line)
				continue
			}
			inHead = false
			body = append(body, line)
		}
		d := Doc{Head: strings.Join(head, "\n"), Body: strings.Join(body, "\n")}
		for _, h := range head {
			if s, ok := strings.CutPrefix(h, "# Source: "); ok {
				d.Source = strings.TrimSpace(s)
			}
		}
		if strings.TrimSpace(d.Body) != "" {
			if err := yaml.Unmarshal([]byte(d.Body), &d.Object); err != nil {
				return nil, fmt.Errorf("the manifest's document from %q does not parse: %w", d.Source, err)
			}
		}
		if d.Object == nil && strings.TrimSpace(d.Head) == "" {
			continue
		}
		docs = append(docs, d)
	}
	return docs, nil
}

// Join writes documents back as Helm stores a manifest.
func Join(docs []Doc) string {
	var b strings.Builder
	for _, d := range docs {
		b.WriteString("---\n")
		if d.Head != "" {
			b.WriteString(strings.TrimRight(d.Head, "\n"))
			b.WriteString("\n")
		}
		b.WriteString(strings.TrimRight(d.Body, "\n"))
		b.WriteString("\n")
	}
	return b.String()
}
