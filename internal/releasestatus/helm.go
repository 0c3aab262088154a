package releasestatus

import (
	"fmt"
	"sort"
	"time"

	"helm.sh/helm/v4/pkg/release"
	releasev1 "helm.sh/helm/v4/pkg/release/v1"
	"helm.sh/helm/v4/pkg/storage"
	"helm.sh/helm/v4/pkg/storage/driver"
	"k8s.io/client-go/kubernetes"
)

// ChartName is the chart's name in Chart.yaml.
const ChartName = "widget-operator"

// Release is the Helm release's last revision, as Helm recorded it.
type Release struct {
	Name         string    `json:"name"`
	Namespace    string    `json:"namespace"`
	Revision     int       `json:"revision"`
	Status       string    `json:"status"`
	Description  string    `json:"description,omitempty"`
	Chart        string    `json:"chart"`
	ChartVersion string    `json:"chartVersion"`
	AppVersion   string    `json:"appVersion,omitempty"`
	Updated      time.Time `json:"updated"`
	// Stage is the apiUpgrade.stage value the revision was rendered with (the user's value
	// over the chart's default).
	Stage string `json:"stage"`
	// Hooks are the last run of each hook of the revision (from Helm's records), or the hook
	// Jobs still in the namespace (from the release-info ConfigMap: a succeeded hook's Job is
	// deleted, so only failed and running ones are seen).
	Hooks []Hook `json:"hooks,omitempty"`
	// Source says what the release was read from: SourceReleaseInfo (the default, no Secret
	// read) or SourceHelmStorage (--helm-storage).
	Source string `json:"source"`
}

// Hook is one hook's last run.
type Hook struct {
	Name        string     `json:"name"`
	Kind        string     `json:"kind"`
	Events      []string   `json:"events"`
	Phase       string     `json:"phase"`
	StartedAt   *time.Time `json:"startedAt,omitempty"`
	CompletedAt *time.Time `json:"completedAt,omitempty"`
	// Revision is the revision the hook ran for, when read from its Job.
	Revision int `json:"revision,omitempty"`
	// Superseded: read from a Job that no longer speaks for the applied revision (an older
	// revision's, or a post-hook of a revision rolled back since); listed, never a cause.
	Superseded bool `json:"superseded,omitempty"`
}

// ReleaseStorage is Helm's storage of namespace's releases for the driver Helm uses
// (HELM_DRIVER: secret, the default, or configmap).
func ReleaseStorage(cs kubernetes.Interface, namespace, helmDriver string) (*storage.Storage, error) {
	switch helmDriver {
	case "", "secret", "secrets":
		return storage.Init(driver.NewSecrets(cs.CoreV1().Secrets(namespace))), nil
	case "configmap", "configmaps":
		return storage.Init(driver.NewConfigMaps(cs.CoreV1().ConfigMaps(namespace))), nil
	}
	return nil, fmt.Errorf("HELM_DRIVER %q: widgetctl reads releases stored as secret or configmap", helmDriver)
}

// readRelease reads the last revision of release name, or, when name is empty, of the one
// release of this chart in the namespace.
func readRelease(st *storage.Storage, name string) (*Release, error) {
	if name == "" {
		all, err := st.ListReleases()
		if err != nil {
			return nil, fmt.Errorf("list Helm releases: %w", err)
		}
		names := map[string]bool{}
		for _, r := range all {
			if rel, err := asV1(r); err == nil && rel.Chart != nil && rel.Chart.Metadata != nil && rel.Chart.Metadata.Name == ChartName {
				names[rel.Name] = true
			}
		}
		if len(names) != 1 {
			return nil, fmt.Errorf("found %d Helm releases of chart %s here (%v); name one with --release", len(names), ChartName, sortedKeys(names))
		}
		for n := range names {
			name = n
		}
	}
	last, err := st.Last(name)
	if err != nil {
		return nil, fmt.Errorf("read Helm release %s: %w", name, err)
	}
	rel, err := asV1(last)
	if err != nil {
		return nil, err
	}
	out := &Release{Name: rel.Name, Namespace: rel.Namespace, Revision: rel.Version, Stage: stageValue(rel), Source: SourceHelmStorage}
	if rel.Info != nil {
		out.Status, out.Description, out.Updated = string(rel.Info.Status), rel.Info.Description, rel.Info.LastDeployed
	}
	if rel.Chart != nil && rel.Chart.Metadata != nil {
		out.Chart, out.ChartVersion, out.AppVersion = rel.Chart.Metadata.Name, rel.Chart.Metadata.Version, rel.Chart.Metadata.AppVersion
	}
	for _, h := range rel.Hooks {
		hook := Hook{Name: h.Name, Kind: h.Kind, Phase: string(h.LastRun.Phase)}
		for _, e := range h.Events {
			hook.Events = append(hook.Events, string(e))
		}
		if !h.LastRun.StartedAt.IsZero() {
			hook.StartedAt = &h.LastRun.StartedAt
		}
		if !h.LastRun.CompletedAt.IsZero() {
			hook.CompletedAt = &h.LastRun.CompletedAt
		}
		out.Hooks = append(out.Hooks, hook)
	}
	return out, nil
}

func asV1(r release.Releaser) (*releasev1.Release, error) {
	rel, ok := r.(*releasev1.Release)
	if !ok {
		return nil, fmt.Errorf("the Helm release is stored in a format this widgetctl does not read (%T)", r)
	}
	return rel, nil
}

// stageValue is apiUpgrade.stage from the release's values over the chart's defaults.
func stageValue(rel *releasev1.Release) string {
	if s, ok := nested(rel.Config, "apiUpgrade", "stage"); ok {
		return s
	}
	if rel.Chart != nil {
		if s, ok := nested(rel.Chart.Values, "apiUpgrade", "stage"); ok {
			return s
		}
	}
	return ""
}

func nested(m map[string]any, keys ...string) (string, bool) {
	var cur any = m
	for _, k := range keys {
		mm, ok := cur.(map[string]any)
		if !ok {
			return "", false
		}
		cur = mm[k]
	}
	s, ok := cur.(string)
	return s, ok && s != ""
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
