package releasestatus

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// What the chart renders for status (templates/configmap-release-info.yaml and the hook Jobs'
// labels in _helpers.tpl).
const (
	releaseInfoComp = "release-info"
	hooksComp       = "hooks"
	// RevisionLabel is the revision a hook Job ran for.
	RevisionLabel      = "widgetry.io/release-revision"
	helmHookAnnotation = "helm.sh/hook"

	// Where a Release was read from.
	SourceReleaseInfo = "release-info ConfigMap and hook Jobs"
	SourceHelmStorage = "Helm's release records"
)

// readReleaseInfo reads the release from what the chart leaves readable with `view` in the
// release namespace: the release-info ConfigMap (the revision whose resources are applied) and
// the hook Jobs (a failed one is kept by its delete policy; a running one is there until it
// ends). Helm's own records are Secrets, and listing them would show on-call every Secret of
// the namespace, the CA's private key among them.
//
// The status is Helm's word for what these show: failed when a hook of the applied revision or
// a later one failed (a later one: its pre-hook failed, so its resources were never applied),
// pending-install or pending-upgrade while such a hook runs, else deployed.
func readReleaseInfo(ctx context.Context, c client.Reader, namespace, name string) (*Release, error) {
	var cms corev1.ConfigMapList
	sel := client.MatchingLabels{componentLabel: releaseInfoComp}
	if name != "" {
		sel[instanceLabel] = name
	}
	if err := c.List(ctx, &cms, client.InNamespace(namespace), sel); err != nil {
		return nil, fmt.Errorf("list the release-info ConfigMaps in %s: %w", namespace, err)
	}
	var infos []corev1.ConfigMap
	for _, cm := range cms.Items {
		if cm.Data["chart"] == ChartName {
			infos = append(infos, cm)
		}
	}
	switch {
	case len(infos) == 0 && name != "":
		return nil, fmt.Errorf("release %s in %s has no release-info ConfigMap (installed by a chart before 0.4, or deleted): upgrade it, or read Helm's records with --helm-storage", name, namespace)
	case len(infos) == 0:
		return nil, fmt.Errorf("no release of chart %s in %s has a release-info ConfigMap: name the namespace with -n, or read Helm's records with --helm-storage", ChartName, namespace)
	case len(infos) > 1:
		var names []string
		for _, cm := range infos {
			names = append(names, cm.Data["release"])
		}
		sort.Strings(names)
		return nil, fmt.Errorf("found %d releases of chart %s here (%s); name one with --release", len(infos), ChartName, strings.Join(names, ", "))
	}
	cm := infos[0]
	rev, err := strconv.Atoi(cm.Data["revision"])
	if err != nil || rev < 1 {
		return nil, fmt.Errorf("ConfigMap %s/%s: revision %q is not a revision; read Helm's records with --helm-storage", namespace, cm.Name, cm.Data["revision"])
	}
	rel := &Release{Name: cm.Data["release"], Namespace: namespace, Revision: rev, Chart: cm.Data["chart"],
		ChartVersion: cm.Data["chartVersion"], AppVersion: cm.Data["appVersion"], Stage: cm.Data["stage"],
		Source: SourceReleaseInfo, Updated: lastWrite(&cm)}

	var jobs batchv1.JobList
	if err := c.List(ctx, &jobs, client.InNamespace(namespace), client.MatchingLabels{instanceLabel: rel.Name, componentLabel: hooksComp}); err != nil {
		return nil, fmt.Errorf("list the hook Jobs in %s: %w", namespace, err)
	}
	rel.Status, rel.Description = "deployed", fmt.Sprintf("revision %d applied; no hook of it or a later revision failed or runs", rev)
	for i := range jobs.Items {
		h := hookFromJob(&jobs.Items[i])
		h.Superseded = superseded(h, rev)
		rel.Hooks = append(rel.Hooks, h)
		if h.Superseded {
			continue
		}
		switch h.Phase {
		case "Failed":
			rel.Status = "failed"
			rel.Description = fmt.Sprintf("hook %s of revision %d failed (kubectl -n %s logs job/%s)", h.Name, h.Revision, namespace, h.Name)
			if h.Revision > rev {
				rel.Description += fmt.Sprintf("; revision %d was not applied", h.Revision)
			}
		case "Running":
			if rel.Status != "failed" {
				rel.Status = "pending-upgrade"
				if h.Revision == 1 {
					rel.Status = "pending-install"
				}
				rel.Description = fmt.Sprintf("hook %s of revision %d is running", h.Name, h.Revision)
			}
		}
	}
	sort.Slice(rel.Hooks, func(i, j int) bool { return rel.Hooks[i].Name < rel.Hooks[j].Name })
	return rel, nil
}

// superseded reports whether a hook Job no longer speaks for the release applied at revision
// rev: one of an older revision (kept for its log after it failed), or a post-hook of a later
// one (whose resources were applied, so a rollback since put revision rev's back). A pre-hook
// of a later revision that failed is the reason that revision was never applied.
func superseded(h Hook, rev int) bool {
	if h.Revision < rev {
		return true
	}
	if h.Revision == rev {
		return false
	}
	for _, e := range h.Events {
		if strings.HasPrefix(e, "pre-") {
			return false
		}
	}
	return true
}

// hookFromJob is a hook Job's last run as Helm would record it.
func hookFromJob(j *batchv1.Job) Hook {
	h := Hook{Name: j.Name, Kind: "Job", Phase: "Running"}
	h.Revision, _ = strconv.Atoi(j.Labels[RevisionLabel])
	for _, e := range strings.Split(j.Annotations[helmHookAnnotation], ",") {
		if e = strings.TrimSpace(e); e != "" {
			h.Events = append(h.Events, e)
		}
	}
	if t := j.Status.StartTime; t != nil {
		h.StartedAt = &t.Time
	}
	for _, c := range j.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			h.Phase = "Succeeded"
		case batchv1.JobFailed:
			h.Phase = "Failed"
		default:
			continue
		}
		done := c.LastTransitionTime.Time
		if j.Status.CompletionTime != nil {
			done = j.Status.CompletionTime.Time
		}
		h.CompletedAt = &done
	}
	return h
}

// lastWrite is when the object was last written, from its managed fields (Helm's apply).
func lastWrite(o client.Object) time.Time {
	last := o.GetCreationTimestamp().Time
	for _, m := range o.GetManagedFields() {
		if m.Time != nil && m.Time.After(last) {
			last = m.Time.Time
		}
	}
	return last.UTC()
}
