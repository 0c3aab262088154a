package upgrade

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/widgetry/widget-operator/internal/backup"
	"github.com/widgetry/widget-operator/internal/census"
	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/metalist"
)

// Clients are what the preflight checks read and write through.
type Clients struct {
	Client   client.Client
	Metadata metadata.Interface
	Probe    ProbeOptions
	// DryRunNamespace is where the dry-run create is tried ("default").
	DryRunNamespace string
	// Traffic counts the requests through Old (the flip records a baseline; unserve and
	// remove refuse while there is traffic); nil fails those checks.
	Traffic *TrafficCheck
	// RecordsNamespace is where backups are recorded (the release namespace).
	RecordsNamespace string
	// Census finds the Helm release revisions and GitOps inventories that declare kind
	// through apiVersion (the CRD's kind through Old); nil skips the check with a warning.
	Census func(apiVersion, kind string) (*census.Result, error)
	// AllowOldManifestsReason lets unserve and remove through despite such releases; it is
	// recorded as a Warning event on the CRD.
	AllowOldManifestsReason string
	// AllowUndrilledReason lets unserve and remove through without a backup taken after the
	// flip and drilled; it is recorded as a Warning event on the CRD.
	AllowUndrilledReason string
}

// CheckResult is the outcome of one check.
type CheckResult struct {
	Check Check  `json:"check"`
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
	// Note is what a passing check found worth telling (the traffic counted).
	Note string `json:"note,omitempty"`
}

// Preflight runs the checks of every step and returns their results, and a Refusal naming
// the first failed check, the next safe step and its runbook when one fails.
func Preflight(ctx context.Context, cl Clients, cfg Config, o *Observation, steps []Step) ([]CheckResult, error) {
	var results []CheckResult
	for _, s := range steps {
		for _, check := range s.Checks {
			note, err := runCheck(ctx, cl, cfg, o, s, check)
			r := CheckResult{Check: check, OK: err == nil, Note: note}
			if err != nil {
				r.Error = err.Error()
			}
			results = append(results, r)
			if err != nil {
				return results, &Refusal{
					Message: fmt.Sprintf("preflight for %s -> %s refused: %s: %v", stageName(s.From), s.To, check, err),
					Next:    nextSafeStep(cfg, o, s, check),
				}
			}
		}
	}
	return results, nil
}

func stageName(s crd.Stage) string {
	if s == "" {
		return "none or inconsistent"
	}
	return string(s)
}

// nextSafeStep says what to do instead of a refused step.
func nextSafeStep(cfg Config, o *Observation, s Step, check Check) string {
	switch check {
	case CheckNothingNewStored:
		return fmt.Sprintf("reverse migration first: widgetctl migrate --crd %s --to %s (every object rewritten as %s, %s trimmed), then retry (%s)",
			cfg.CRD, cfg.Old, cfg.Old, cfg.New, cfg.Runbook(crd.StageAddVersion))
	case CheckOnlyNewStored:
		return fmt.Sprintf("stage migrate: widgetctl migrate --crd %s (%s)", cfg.CRD, cfg.Runbook(crd.StageMigrate))
	case CheckBuildConversion:
		return fmt.Sprintf("do not roll this build out: its conversion loses data; keep the running build (helm upgrade --set image.tag=<a good build>, the same stage) (%s)", cfg.Runbook(s.To))
	case CheckOwnerReferences:
		return fmt.Sprintf("let the operator rewrite its children's owner references (it does after the storage flip; is it running?), then retry (%s)", cfg.Runbook(crd.StageUnserve))
	case CheckOldTraffic:
		return fmt.Sprintf("stay at %s until the clients moved to %s; or, knowing the cost, override with a reason (helm: --set apiUpgrade.oldVersionTraffic.allowReason=<why>; widgetctl: --allow-old-version-traffic=<why>), recorded as an event on the CRD (%s)",
			stageName(o.Stage), cfg.New, cfg.Runbook(s.To))
	case CheckOldManifests:
		return fmt.Sprintf("move each release listed: widgetctl migrate-release NAME -n NAMESPACE (and its chart to %s), then retry; or, knowing those releases cannot be upgraded or rolled back after remove, override with a reason (helm: --set apiUpgrade.census.allowReason=<why>; widgetctl: --allow-old-release-manifests=<why>), recorded as an event on the CRD (%s)",
			cfg.New, cfg.Runbook(s.To))
	case CheckRestoreDrilled:
		return fmt.Sprintf("take a backup now and drill it: widgetctl backup --out DIR --records-namespace NAMESPACE, then widgetctl restore --from DIR --drill --records-namespace NAMESPACE, and retry; or, knowing no backup is proven to restore, override with a reason (helm: --set apiUpgrade.backup.allowReason=<why>; widgetctl: --allow-undrilled-backup=<why>), recorded as an event on the CRD (%s)",
			restoreRunbook(cfg))
	case CheckOldManagedFields:
		return fmt.Sprintf("drop them: widgetctl migrate --crd %s --drop-managed-fields-of %s (the chart's post-upgrade hook at unserve does), then retry (%s)",
			cfg.CRD, cfg.Old, cfg.Runbook(crd.StageRemove))
	}
	return fmt.Sprintf("stay at %s and fix the %s check (%s)", stageName(o.Stage), check, cfg.Runbook(s.To))
}

func runCheck(ctx context.Context, cl Clients, cfg Config, o *Observation, s Step, check Check) (string, error) {
	switch check {
	case CheckRecordTraffic:
		return recordBaseline(ctx, cl.Traffic, cfg, o.live)
	case CheckOldTraffic:
		return oldVersionTraffic(ctx, cl.Client, cl.Traffic, cfg, o.live, s.To)
	case CheckBackupRecorded:
		return backupRecorded(ctx, cl, cfg), nil
	case CheckRestoreDrilled:
		return restoreDrilled(ctx, cl, cfg, o.live, s.To)
	case CheckOldManifests:
		return oldManifests(ctx, cl, cfg, o.live, s.To)
	}
	return "", runPlainCheck(ctx, cl, cfg, o, check)
}

// runPlainCheck runs a check that only passes or fails.
func runPlainCheck(ctx context.Context, cl Clients, cfg Config, o *Observation, check Check) error {
	switch check {
	case CheckEstablished:
		if o.Conditions["Established"] != "True" {
			return fmt.Errorf("CRD %s is not Established (conditions %v)", cfg.CRD, o.Conditions)
		}
		return nil
	case CheckWebhookProbe:
		return ProbeConversion(ctx, o.live, cfg, cl.Probe)
	case CheckBuildConversion:
		group, kind := o.live.Spec.Group, o.live.Spec.Names.Kind
		return ProbeBuildConversion(ctx, cfg, group, kind)
	case CheckDryRunCreate:
		return dryRunCreate(ctx, cl, cfg, o)
	case CheckReadAllVersions:
		return readThroughServedVersions(ctx, cl.Client, o.live)
	case CheckOnlyNewStored:
		if !slices.Equal(o.StoredVersions, []string{cfg.New}) {
			return fmt.Errorf("storedVersions is %v: objects may still be stored as %s, and once %s stops being served they could not be read or migrated", o.StoredVersions, cfg.Old, cfg.Old)
		}
		return nil
	case CheckNothingNewStored:
		if slices.Contains(o.StoredVersions, cfg.New) {
			return fmt.Errorf("storedVersions is %v: objects may be stored as %s, and the apiserver refuses to remove a stored version from spec.versions (the objects would become unreadable)", o.StoredVersions, cfg.New)
		}
		return nil
	case CheckOwnerReferences:
		return ownerReferencesToOld(ctx, cl.Metadata, cfg, o.live)
	case CheckOldManagedFields:
		return managedFieldsOfOld(ctx, cl.Metadata, cfg, o.live)
	}
	return fmt.Errorf("unknown check %s", check)
}

// dryRunCreate creates an object through New with dryRun=All: the apiserver validates it
// against New's schema and, with the storage version not yet New, converts it through the
// webhook exactly as real writes will.
func dryRunCreate(ctx context.Context, cl Clients, cfg Config, o *Observation) error {
	if cfg.DryRunObject == nil {
		return nil
	}
	ns := cl.DryRunNamespace
	if ns == "" {
		ns = "default"
	}
	obj := cfg.DryRunObject(ns)
	if err := cl.Client.Create(ctx, obj, client.DryRunAll); err != nil {
		return fmt.Errorf("server-side dry-run create through %s in namespace %s: %w", cfg.New, ns, err)
	}
	return nil
}

// readThroughServedVersions lists every object through every served version, page by page:
// each read of the version not stored goes through the conversion webhook, as the apiserver
// will for every client. Every version is read at the first LIST's resourceVersion, so
// objects written meanwhile (clients keep writing during an upgrade) make no difference.
func readThroughServedVersions(ctx context.Context, c client.Client, live *apiextensionsv1.CustomResourceDefinition) error {
	counts := map[string]int{}
	snapshot := ""
	served := 0
	for _, v := range live.Spec.Versions {
		if v.Served {
			served++
		}
	}
	for _, v := range live.Spec.Versions {
		// With every object stored in the storage version, reading through it converts
		// nothing, so it proves nothing the other versions' reads do not; and before the
		// storage flip that version is the one being retired, where such a read would count
		// as a client of the deprecated version for an hour (WidgetDeprecatedVersionInUse
		// and the unserve preflight's traffic check).
		if !v.Served || (served > 1 && v.Storage && slices.Equal(live.Status.StoredVersions, []string{v.Name})) {
			continue
		}
		rv, err := metalist.EachObjectAt(ctx, c, live.Spec.Group+"/"+v.Name, live.Spec.Names.ListKind, snapshot, func(*unstructured.Unstructured) error {
			counts[v.Name]++
			return nil
		})
		if err != nil {
			return fmt.Errorf("list %s through %s at resourceVersion %q: %w", live.Spec.Names.Plural, v.Name, snapshot, err)
		}
		if snapshot == "" {
			snapshot = rv
		}
	}
	for _, n := range counts {
		for _, m := range counts {
			if n != m {
				return fmt.Errorf("the served versions list different numbers of objects at resourceVersion %s: %v", snapshot, counts)
			}
		}
	}
	return nil
}

// ownerReferencesToOld scans OwnerResources for owner references naming the CRD's kind
// through Old.
func ownerReferencesToOld(ctx context.Context, md metadata.Interface, cfg Config, live *apiextensionsv1.CustomResourceDefinition) error {
	oldAPIVersion := live.Spec.Group + "/" + cfg.Old
	var found []string
	for _, gvr := range cfg.OwnerResources {
		err := metalist.Each(ctx, md.Resource(gvr), func(item *metav1.PartialObjectMetadata) error {
			for _, ref := range item.OwnerReferences {
				if ref.APIVersion == oldAPIVersion && ref.Kind == live.Spec.Names.Kind {
					found = append(found, fmt.Sprintf("%s %s/%s", gvr.Resource, item.Namespace, item.Name))
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("list %s to check owner references: %w", gvr.Resource, err)
		}
	}
	if len(found) > 0 {
		shown := found[:min(5, len(found))]
		return fmt.Errorf("%d object(s) have owner references to %s %s, which the garbage collector cannot resolve once %s is not served: %s",
			len(found), oldAPIVersion, live.Spec.Names.Kind, cfg.Old, strings.Join(shown, ", "))
	}
	return nil
}

// managedFieldsOfOld lists every object of the CRD (metadata only, through the storage
// version) for managedFields entries recorded through Old. Server-side apply converts every
// entry through its version; once Old is gone from spec.versions, an apply to an object that
// keeps such an entry fails (kubernetes#111937).
func managedFieldsOfOld(ctx context.Context, md metadata.Interface, cfg Config, live *apiextensionsv1.CustomResourceDefinition) error {
	oldAPIVersion := live.Spec.Group + "/" + cfg.Old
	gvr := schema.GroupVersionResource{Group: live.Spec.Group, Version: cfg.New, Resource: live.Spec.Names.Plural}
	var found []string
	err := metalist.Each(ctx, md.Resource(gvr), func(item *metav1.PartialObjectMetadata) error {
		for _, e := range item.ManagedFields {
			if e.APIVersion == oldAPIVersion {
				found = append(found, fmt.Sprintf("%s/%s (manager %s)", item.Namespace, item.Name, e.Manager))
				break
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("list %s to check their managedFields: %w", gvr.Resource, err)
	}
	if len(found) > 0 {
		shown := found[:min(5, len(found))]
		return fmt.Errorf("%d object(s) keep managedFields entries recorded through %s; once %s is removed, server-side apply to them fails: %s",
			len(found), oldAPIVersion, cfg.Old, strings.Join(shown, ", "))
	}
	return nil
}

// backupRecorded warns, without refusing, when no backup of the CRD is recorded in the
// release namespace: rollback case 2 (back from flip-storage after writes) assumes one.
func backupRecorded(ctx context.Context, cl Clients, cfg Config) string {
	r, err := backup.LastRecord(ctx, cl.Client, cl.RecordsNamespace, cfg.CRD)
	switch {
	case err != nil:
		return "WARNING: " + err.Error()
	case r == nil:
		return fmt.Sprintf("WARNING: no backup of %s is recorded in namespace %s; take one before the storage flip: widgetctl backup --crd %s --out DIR --records-namespace %s (%s)",
			cfg.CRD, cl.RecordsNamespace, cfg.CRD, cl.RecordsNamespace, cfg.Runbook(crd.StageFlipStorage))
	}
	return fmt.Sprintf("backup of %v objects taken %s ago (%s on %s)", r.Objects, time.Since(r.Time).Round(time.Second), r.Dir, r.Host)
}

// restoreDrilled warns, without refusing yet, unless the recorded backup was taken after the
// storage flip (it holds the objects through the new version, which is all a restore can
// write through once the old one goes) and a restore drill of it passed: a backup nobody has
// restored is a hope, and after remove a bad one cannot be retaken through the old version.
func restoreDrilled(ctx context.Context, cl Clients, cfg Config, live *apiextensionsv1.CustomResourceDefinition, to crd.Stage) (string, error) {
	drilled, problem := drillState(ctx, cl, cfg)
	if problem == "" {
		return drilled, nil
	}
	if cl.AllowUndrilledReason == "" {
		return "", errors.New(problem)
	}
	note := fmt.Sprintf("overridden (%q): %s", cl.AllowUndrilledReason, problem)
	if err := recordOverride(ctx, cl.Client, live, to, "UndrilledBackupOverridden", note); err != nil {
		return "", fmt.Errorf("the override of the backup-drilled check could not be recorded, so it is not taken: %w", err)
	}
	return note, nil
}

// drillState reads the recorded backup and its drill once: what was drilled, or (problem) why
// the recorded backup is not one taken after the flip and drilled, with the commands that make
// it one.
func drillState(ctx context.Context, cl Clients, cfg Config) (drilled, problem string) {
	todo := fmt.Sprintf("widgetctl backup --out DIR --records-namespace %s, then widgetctl restore --from DIR --drill --records-namespace %s (%s)",
		cl.RecordsNamespace, cl.RecordsNamespace, restoreRunbook(cfg))
	if cl.RecordsNamespace == "" {
		return "", "no namespace to read the backup record from: pass --records-namespace (the release namespace)"
	}
	r, err := backup.LastRecord(ctx, cl.Client, cl.RecordsNamespace, cfg.CRD)
	switch {
	case err != nil:
		return "", err.Error()
	case r == nil:
		return "", fmt.Sprintf("no backup of %s is recorded in namespace %s, so none was drilled; before the old version goes: %s", cfg.CRD, cl.RecordsNamespace, todo)
	case r.StorageVersion != cfg.New:
		return "", fmt.Sprintf("the recorded backup (%s) was taken with %s as the storage version, before the flip; take one now and drill it: %s", r.Time.Format(time.RFC3339), r.StorageVersion, todo)
	}
	d, err := backup.LastDrill(ctx, cl.Client, cl.RecordsNamespace, cfg.CRD)
	switch {
	case err != nil:
		return "", err.Error()
	case d == nil || !d.BackupTime.Equal(r.Time):
		return "", fmt.Sprintf("the recorded backup (%s, %s) has not been drilled: widgetctl restore --from %s --drill --records-namespace %s", r.Time.Format(time.RFC3339), r.Dir, r.Dir, cl.RecordsNamespace)
	case !d.OK:
		return "", fmt.Sprintf("the drill of the recorded backup (%s) failed for %d object(s) on %s: that backup would not restore them; see %s", r.Dir, d.Failed, d.Time.Format(time.RFC3339), restoreRunbook(cfg))
	}
	return fmt.Sprintf("backup %s (taken %s ago) drilled %s ago: %d objects restored and read back", r.Dir, time.Since(r.Time).Round(time.Second), time.Since(d.Time).Round(time.Second), d.Objects), ""
}

// restoreRunbook is the restore procedure, beside the upgrade runbooks.
func restoreRunbook(cfg Config) string {
	return path.Join(path.Dir(cfg.RunbookDir), "procedures", "restore.md")
}
