package census

import (
	"fmt"
	"strings"
)

// The places a census reads.
const (
	SourceHelm = "Helm release"
	SourceArgo = "Argo CD Application"
	SourceFlux = "Flux Kustomization"
)

// Finding is one place that declares objects through the version: a Helm release revision,
// an Argo CD Application or a Flux Kustomization.
type Finding struct {
	// Source is SourceHelm, SourceArgo or SourceFlux.
	Source    string `json:"source"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Revision, Status and Driver ("Secret" or "ConfigMap") of a Helm release revision.
	Revision int    `json:"revision,omitempty"`
	Status   string `json:"status,omitempty"`
	Driver   string `json:"driver,omitempty"`
	// Objects are "namespace/name" of each object declared through the version, with the
	// template it comes from for a Helm release.
	Objects []string `json:"objects"`
}

func (f Finding) String() string {
	where := fmt.Sprintf("%s %s/%s", f.Source, f.Namespace, f.Name)
	if f.Source == SourceHelm {
		where += fmt.Sprintf(" revision %d (%s, %s driver)", f.Revision, f.Status, f.Driver)
	}
	return where + ": " + strings.Join(f.Objects, ", ")
}

// Fix says how to move the place to newVersion.
func (f Finding) Fix(newVersion string) string {
	switch f.Source {
	case SourceHelm:
		return fmt.Sprintf("widgetctl migrate-release %s -n %s", f.Name, f.Namespace)
	case SourceArgo:
		return fmt.Sprintf("change the manifests of Argo CD Application %s/%s to %s and sync it", f.Namespace, f.Name, newVersion)
	}
	return fmt.Sprintf("change the manifests of Flux Kustomization %s/%s to %s and reconcile it", f.Namespace, f.Name, newVersion)
}

// Fixes is one Fix per place found, in order, without repeats (a release's revisions share
// one).
func Fixes(found []Finding, newVersion string) string {
	seen := map[string]bool{}
	var out []string
	for _, f := range found {
		if c := f.Fix(newVersion); !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
	}
	return strings.Join(out, "; ")
}
