// Package releasemigrate rewrites the manifests Helm stores with a release, turning every
// Widget declared through v1alpha1 into the same Widget through v1, converted by this build's
// conversion, as helm-mapkubeapis does for Kubernetes' own removed APIs. Helm diffs an upgrade
// or a rollback against the stored manifest; once v1alpha1 is removed from the CRD, a stored
// v1alpha1 Widget makes every later upgrade fail ("unable to build kubernetes objects from
// current release manifest"). Nothing in the cluster changes but the release records.
package releasemigrate

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	releasev1 "helm.sh/helm/v4/pkg/release/v1"
	"sigs.k8s.io/yaml"

	v1 "github.com/widgetry/widget-operator/api/v1"
	"github.com/widgetry/widget-operator/api/v1alpha1"
	"github.com/widgetry/widget-operator/internal/conversion"
	"github.com/widgetry/widget-operator/internal/helmmanifest"
)

// Change is one Widget rewritten in a revision's manifest.
type Change struct {
	Revision int    `json:"revision"`
	Object   string `json:"object"`
	Source   string `json:"source,omitempty"`
	Before   string `json:"before"`
	After    string `json:"after"`
}

// Rewrite returns rel's manifest with every v1alpha1 Widget converted to v1, and the changes;
// the manifest is unchanged when there are none. A Widget it cannot convert (a field v1alpha1
// does not have, a value the conversion refuses) is an error naming it and its template, and
// nothing is rewritten.
func Rewrite(rel *releasev1.Release) (string, []Change, error) {
	docs, err := helmmanifest.Split(rel.Manifest)
	if err != nil {
		return "", nil, err
	}
	var changes []Change
	for i := range docs {
		d := &docs[i]
		if d.APIVersion() != v1alpha1.GroupVersion.String() || d.Kind() != "Widget" {
			continue
		}
		body, err := toHub(d.Object)
		if err != nil {
			return "", nil, fmt.Errorf("revision %d: Widget %s (%s) cannot be converted to v1: %w; fix it in the chart and upgrade while v1alpha1 is served, or edit the release record by hand",
				rel.Version, d.Name(), d.Source, err)
		}
		changes = append(changes, Change{Revision: rel.Version, Object: d.Name(), Source: d.Source, Before: d.Body, After: body})
		d.Body = body
	}
	if len(changes) == 0 {
		return rel.Manifest, nil, nil
	}
	return helmmanifest.Join(docs), changes, nil
}

// toHub converts a v1alpha1 Widget as templated to v1 YAML: only what the template set, plus
// what the conversion needs to keep (its annotations).
func toHub(obj map[string]any) (string, error) {
	raw, err := json.Marshal(obj)
	if err != nil {
		return "", err
	}
	spoke := &v1alpha1.Widget{}
	dec := json.NewDecoder(bytes.NewReader(raw))
	// A field v1alpha1 does not know would be lost without a word.
	dec.DisallowUnknownFields()
	if err := dec.Decode(spoke); err != nil {
		return "", err
	}
	hub := &v1.Widget{}
	if err := conversion.ConvertWidgetToHub(context.Background(), spoke, hub); err != nil {
		return "", err
	}
	hub.APIVersion, hub.Kind = v1.GroupVersion.String(), "Widget"
	out, err := json.Marshal(hub)
	if err != nil {
		return "", err
	}
	m := map[string]any{}
	if err := json.Unmarshal(out, &m); err != nil {
		return "", err
	}
	// The zero values the typed struct adds, which the template did not write.
	if md, ok := m["metadata"].(map[string]any); ok && md["creationTimestamp"] == nil {
		delete(md, "creationTimestamp")
	}
	if st, ok := m["status"].(map[string]any); ok && len(st) == 0 {
		delete(m, "status")
	}
	if _, had := obj["status"]; !had {
		delete(m, "status")
	}
	y, err := yaml.Marshal(m)
	if err != nil {
		return "", err
	}
	return string(y), nil
}
