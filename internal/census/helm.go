// Package census finds the places that still declare an object through an API version about
// to go. Once the version is removed, a Helm release whose stored manifest declares such an
// object can no longer be upgraded or rolled back ("unable to build kubernetes objects from
// current release manifest"), a GitOps tool applying such a manifest fails, and the traffic
// the upgrade gates count does not show a release upgraded once a month. This package reads
// every Helm release's stored revisions (Flux HelmReleases included: helm-controller stores
// them the same way) and the inventories of Argo CD Applications and Flux Kustomizations.
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
			out = append(out, Finding{Source: SourceHelm, Driver: d.name, Namespace: rel.Namespace, Name: rel.Name, Revision: rel.Version, Status: status, Objects: objects})
		}
	}
	slices.SortFunc(out, func(a, b Finding) int {
		return strings.Compare(fmt.Sprintf("%s/%s/%09d", a.Namespace, a.Name, a.Revision), fmt.Sprintf("%s/%s/%09d", b.Namespace, b.Name, b.Revision))
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
