package backup

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/widgetry/widget-operator/internal/fielddiff"
)

// ErrNoVersion: the backup holds no version the cluster serves, so nothing can be written
// or compared through one.
var ErrNoVersion = errors.New("no version to restore through")

// RestoreOptions shape a Restore.
type RestoreOptions struct {
	// DryRun sends every write with dryRun=All: the apiserver validates, admits and converts
	// it as it would the real one, and stores nothing.
	DryRun bool
}

// RestoreReport is what Restore did, object by object.
type RestoreReport struct {
	// Version is the version every object was written through: the storage version when the
	// backup holds it (no conversion on the write), else one both serve.
	Version string `json:"version"`
	DryRun  bool   `json:"dryRun,omitempty"`
	// Created are the objects of the backup the cluster no longer had.
	Created []string `json:"created,omitempty"`
	// Restored are "namespace/name: path: live != backup" for every field put back.
	Restored []string `json:"restored,omitempty"`
	// Unchanged counts the objects that already matched the backup.
	Unchanged int `json:"unchanged"`
	// DroppedOwnerReferences are owner references of the backup left out because their
	// owner is gone (or was recreated with another uid): written back, the garbage collector
	// would delete the restored object at once.
	DroppedOwnerReferences []string `json:"droppedOwnerReferences,omitempty"`
	// Failed are the objects that could not be written, each with the apiserver's answer and
	// what to do.
	Failed []string `json:"failed,omitempty"`
	// Verify is the comparison with the backup after the writes (not on a dry run).
	Verify *Report `json:"verify,omitempty"`
}

// OK reports whether every object was written and the cluster now matches the backup, apart
// from the owner references that had to be dropped.
func (r *RestoreReport) OK() bool {
	if len(r.Failed) > 0 {
		return false
	}
	if r.Verify == nil {
		return true
	}
	return len(r.Verify.Missing) == 0 && len(r.Unexplained()) == 0
}

// Unexplained are the fields that still differ from the backup after the restore, apart from
// the owner references the restore dropped.
func (r *RestoreReport) Unexplained() []string {
	if r.Verify == nil {
		return nil
	}
	dropped := map[string]bool{}
	for _, d := range r.DroppedOwnerReferences {
		dropped[strings.SplitN(d, ":", 2)[0]] = true
	}
	var out []string
	for _, c := range r.Verify.Changed {
		// "version namespace/name: path: ..."
		fields := strings.SplitN(c, " ", 3)
		if len(fields) == 3 && strings.HasPrefix(fields[2], "metadata.ownerReferences") && dropped[strings.TrimSuffix(fields[1], ":")] {
			continue
		}
		out = append(out, c)
	}
	return out
}

// restoreTarget reads the backup's CRD and picks the version a restore (or a drill) writes
// through.
func restoreTarget(ctx context.Context, c client.Client, b *Backup) (*apiextensionsv1.CustomResourceDefinition, string, error) {
	live, err := readCRD(ctx, c, b.Manifest.CRD)
	if err != nil {
		return nil, "", err
	}
	version, err := restoreVersion(live, b)
	return live, version, err
}

// restoreVersion picks the version to write through: the storage version when the backup
// holds it, else the first version the cluster serves that the backup holds.
func restoreVersion(live *apiextensionsv1.CustomResourceDefinition, b *Backup) (string, error) {
	var served []string
	for _, v := range live.Spec.Versions {
		if v.Served && v.Storage && b.Objects[v.Name] != nil {
			return v.Name, nil
		}
		if v.Served {
			served = append(served, v.Name)
		}
	}
	for _, v := range live.Spec.Versions {
		if v.Served && b.Objects[v.Name] != nil {
			return v.Name, nil
		}
	}
	return "", fmt.Errorf("%w: the backup holds the objects as %v show them, the cluster serves %v (take backups where the new version is served: from add-version on)", ErrNoVersion, b.Versions, served)
}

// Restore brings the cluster back to the backup: every object of the backup the cluster no
// longer has is created, every object whose user-written fields (spec, labels, annotations,
// finalizers, owner references) differ gets the backup's back, written through the storage
// version when the backup holds it. Objects are matched by namespace and name, so an object
// deleted and created again since the backup is restored too. Owner references are kept only
// where the owner still exists with the recorded uid. Objects created since the backup are
// left alone. Restore goes on past an object it cannot write and reports it; after a real run
// it compares the cluster with the backup (Compare).
func Restore(ctx context.Context, c client.Client, b *Backup, opts RestoreOptions) (*RestoreReport, error) {
	live, version, err := restoreTarget(ctx, c, b)
	if err != nil {
		return nil, err
	}
	r := &RestoreReport{Version: version, DryRun: opts.DryRun}
	list, err := listAll(ctx, c, live, version)
	if err != nil {
		return nil, err
	}
	current := map[string]*unstructured.Unstructured{}
	for i := range list.Items {
		current[key(&list.Items[i])] = &list.Items[i]
	}
	var writeOpts []client.CreateOption
	var updateOpts []client.UpdateOption
	if opts.DryRun {
		writeOpts = append(writeOpts, client.DryRunAll)
		updateOpts = append(updateOpts, client.DryRunAll)
	}
	owners := ownerCache{c: c, seen: map[string]bool{}}
	for _, old := range sortedByKey(b.Objects[version]) {
		k := key(old)
		want := userFields(old)
		refs, dropped, err := owners.keep(ctx, old)
		if err != nil {
			r.Failed = append(r.Failed, fmt.Sprintf("%s: %v", k, err))
			continue
		}
		for _, d := range dropped {
			r.DroppedOwnerReferences = append(r.DroppedOwnerReferences, k+": "+d)
		}
		setOwnerReferences(want, refs)
		cur, exists := current[k]
		switch {
		case !exists:
			obj := &unstructured.Unstructured{Object: want}
			obj.SetAPIVersion(live.Spec.Group + "/" + version)
			obj.SetKind(live.Spec.Names.Kind)
			if err := c.Create(ctx, obj, writeOpts...); err != nil {
				r.Failed = append(r.Failed, fmt.Sprintf("%s: create: %v%s", k, err, advice(err, old.GetNamespace())))
				continue
			}
			r.Created = append(r.Created, k)
		case cur.GetDeletionTimestamp() != nil:
			r.Failed = append(r.Failed, fmt.Sprintf("%s: being deleted since %s (finalizers %v): rerun the restore once it is gone", k, cur.GetDeletionTimestamp().UTC().Format("2006-01-02T15:04:05Z"), cur.GetFinalizers()))
		default:
			diffs := fielddiff.Diff(compared(cur), comparedOf(want))
			if len(diffs) == 0 {
				r.Unchanged++
				continue
			}
			obj := cur.DeepCopy()
			putUserFields(obj, want)
			if err := c.Update(ctx, obj, updateOpts...); err != nil {
				r.Failed = append(r.Failed, fmt.Sprintf("%s: update: %v%s", k, err, advice(err, old.GetNamespace())))
				continue
			}
			for _, d := range diffs {
				r.Restored = append(r.Restored, k+": "+d)
			}
		}
	}
	if !opts.DryRun {
		if r.Verify, err = Compare(ctx, c, b); err != nil {
			return r, fmt.Errorf("compare with the backup after the restore: %w", err)
		}
	}
	return r, nil
}

// advice says what to do about a failed write.
func advice(err error, namespace string) string {
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Sprintf(" (create namespace %s first: kubectl create namespace %s; then rerun the restore)", namespace, namespace)
	case apierrors.IsConflict(err):
		return " (written by someone else meanwhile: rerun the restore)"
	case apierrors.IsInvalid(err) || apierrors.IsForbidden(err):
		return " (the apiserver refused the backup's content: see the message; fix the object by hand or restore it with kubectl)"
	}
	return ""
}

// userFields is the part of a backed-up object a restore writes: spec and the metadata a user
// wrote (name, namespace, labels, annotations, finalizers, owner references).
func userFields(o *unstructured.Unstructured) map[string]any {
	c := compared(o)
	out := map[string]any{}
	for k, v := range c {
		out[k] = runtime.DeepCopyJSONValue(v)
	}
	return out
}

// comparedOf is compared for an object given as its user fields.
func comparedOf(fields map[string]any) map[string]any {
	return compared(&unstructured.Unstructured{Object: fields})
}

// putUserFields replaces obj's user fields with want's, leaving status, resourceVersion and
// the rest as read (the update is optimistic: a write meanwhile makes it conflict).
func putUserFields(obj *unstructured.Unstructured, want map[string]any) {
	if spec, ok := want["spec"]; ok {
		obj.Object["spec"] = spec
	} else {
		delete(obj.Object, "spec")
	}
	md, _ := obj.Object["metadata"].(map[string]any)
	wmd, _ := want["metadata"].(map[string]any)
	for _, k := range []string{"labels", "annotations", "finalizers", "ownerReferences"} {
		if v, ok := wmd[k]; ok {
			md[k] = v
		} else {
			delete(md, k)
		}
	}
}

func setOwnerReferences(fields map[string]any, refs []any) {
	md, _ := fields["metadata"].(map[string]any)
	if refs == nil {
		delete(md, "ownerReferences")
		return
	}
	md["ownerReferences"] = refs
}

func sortedByKey(objs map[string]*unstructured.Unstructured) []*unstructured.Unstructured {
	out := slices.Collect(maps.Values(objs))
	slices.SortFunc(out, func(a, b *unstructured.Unstructured) int { return strings.Compare(key(a), key(b)) })
	return out
}

// ownerCache answers whether an owner still exists with the uid a reference records, asking
// the apiserver once per owner.
type ownerCache struct {
	c    client.Client
	seen map[string]bool
}

// keep returns the owner references of o whose owners exist (nil when none were recorded,
// so that a missing list stays missing), and a description of each dropped one.
func (oc *ownerCache) keep(ctx context.Context, o *unstructured.Unstructured) ([]any, []string, error) {
	md, _ := o.Object["metadata"].(map[string]any)
	raw, ok := md["ownerReferences"].([]any)
	if !ok {
		return nil, nil, nil
	}
	kept := []any{}
	var dropped []string
	for i, ref := range o.GetOwnerReferences() {
		exists, err := oc.exists(ctx, o.GetNamespace(), ref)
		if err != nil {
			return nil, nil, err
		}
		if exists {
			kept = append(kept, runtime.DeepCopyJSONValue(raw[i]))
			continue
		}
		dropped = append(dropped, fmt.Sprintf("owner reference to %s %s (uid %s) dropped: that owner is gone", ref.Kind, ref.Name, ref.UID))
	}
	if len(kept) == 0 {
		// All dropped: no list, as the apiserver stores an empty one.
		kept = nil
	}
	return kept, dropped, nil
}

func (oc *ownerCache) exists(ctx context.Context, namespace string, ref metav1.OwnerReference) (bool, error) {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return false, nil
	}
	mapping, err := oc.c.RESTMapper().RESTMapping(gv.WithKind(ref.Kind).GroupKind(), gv.Version)
	if err != nil {
		// A kind the cluster no longer knows owns nothing.
		return false, nil
	}
	id := ref.APIVersion + "/" + ref.Kind + "/" + namespace + "/" + ref.Name + "/" + string(ref.UID)
	if v, ok := oc.seen[id]; ok {
		return v, nil
	}
	owner := &metav1.PartialObjectMetadata{}
	owner.SetGroupVersionKind(gv.WithKind(ref.Kind))
	objKey := client.ObjectKey{Name: ref.Name}
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		objKey.Namespace = namespace
	}
	err = oc.c.Get(ctx, objKey, owner)
	switch {
	case apierrors.IsNotFound(err):
		oc.seen[id] = false
	case err != nil:
		return false, fmt.Errorf("read the owner %s %s: %w", ref.Kind, ref.Name, err)
	default:
		oc.seen[id] = owner.GetUID() == ref.UID
	}
	return oc.seen[id], nil
}
