// Package census finds the places that still declare an object through an API version about
// to go. Once the version is removed, a Helm release whose stored manifest declares such an
// object can no longer be upgraded or rolled back ("unable to build kubernetes objects from
// current release manifest"), and the traffic the upgrade gates count does not show a release
// upgraded once a month. This package reads every Helm release's stored revisions.
package census

import (
	"fmt"
	"slices"
	"strings"

	"helm.sh/helm/v4/pkg/release"
	releasev1 "helm.sh/helm/v4/pkg/release/v1"
	"helm.sh/helm/v4/pkg/storage/driver"
	"k8s.io/client-go/kubernetes"

	"github.com/widgetry/widget-operator/internal/helmmanifest"
)

// Finding is one Helm release revision that declares objects through the version.
type Finding struct {
	// Driver is where Helm stores the release: "Secret" or "ConfigMap".
	Driver    string `json:"driver"`
	Namespace string `json:"namespace"`
	Release   string `json:"release"`
	Revision  int    `json:"revision"`
	Status    string `json:"status"`
	// Objects are "namespace/name (source template)" of each object declared through the
	// version; the namespace is the release's when the manifest names none.
	Objects []string `json:"objects"`
}

func (f Finding) String() string {
	return fmt.Sprintf("Helm release %s/%s revision %d (%s, %s driver): %s", f.Namespace, f.Release, f.Revision, f.Status, f.Driver, strings.Join(f.Objects, ", "))
}

// HelmReleases reads every revision Helm keeps of every release in every namespace, from both
// drivers (Secret, Helm's default, and ConfigMap), and returns those whose manifest declares a
// kind through apiVersion, sorted. It needs list on Secrets and ConfigMaps cluster-wide; an
// error from the apiserver (Forbidden without that RBAC) is returned as is, wrapped.
func HelmReleases(cs kubernetes.Interface, apiVersion, kind string) ([]Finding, error) {
	var out []Finding
	for _, d := range []struct {
		name string
		drv  driver.Driver
	}{
		{"Secret", driver.NewSecrets(cs.CoreV1().Secrets(""))},
		{"ConfigMap", driver.NewConfigMaps(cs.CoreV1().ConfigMaps(""))},
	} {
		all, err := d.drv.List(func(release.Releaser) bool { return true })
		if err != nil {
			return nil, fmt.Errorf("list the Helm releases stored as %ss in every namespace: %w", d.name, err)
		}
		for _, r := range all {
			rel, ok := r.(*releasev1.Release)
			if !ok {
				continue
			}
			objects, err := Declared(rel, apiVersion, kind)
			if err != nil {
				return nil, err
			}
			if len(objects) == 0 {
				continue
			}
			status := ""
			if rel.Info != nil {
				status = rel.Info.Status.String()
			}
			out = append(out, Finding{Driver: d.name, Namespace: rel.Namespace, Release: rel.Name, Revision: rel.Version, Status: status, Objects: objects})
		}
	}
	slices.SortFunc(out, func(a, b Finding) int {
		return strings.Compare(fmt.Sprintf("%s/%s/%09d", a.Namespace, a.Release, a.Revision), fmt.Sprintf("%s/%s/%09d", b.Namespace, b.Release, b.Revision))
	})
	return out, nil
}

// Declared lists the objects of kind through apiVersion in a revision's manifest, as
// "namespace/name (source)".
func Declared(rel *releasev1.Release, apiVersion, kind string) ([]string, error) {
	docs, err := helmmanifest.Split(rel.Manifest)
	if err != nil {
		return nil, fmt.Errorf("the Helm release %s/%s revision %d: %w", rel.Namespace, rel.Name, rel.Version, err)
	}
	var out []string
	for _, d := range docs {
		if d.APIVersion() != apiVersion || d.Kind() != kind {
			continue
		}
		ns := d.Namespace()
		if ns == "" {
			ns = rel.Namespace
		}
		out = append(out, fmt.Sprintf("%s/%s (%s)", ns, d.Name(), d.Source))
	}
	return out, nil
}
