// Package backup writes every object of a CRD, as each served version shows it, and the CRD
// itself to a directory, and compares the live objects with such a backup field by field
// (internal/fielddiff: a missing list is not an empty one). The flip-storage runbook takes one
// first: its rollback case 2 (fields lost by clients of the old version) restores from it.
//
// Layout of a backup directory:
//
//	manifest.json          what was backed up, when, from which server (Manifest)
//	crd.json               the CustomResourceDefinition as read
//	objects.<version>.json every object as listed through that version (a List; resourceVersion,
//	                       uid and managedFields as the apiserver returned them)
//
// The files are JSON as the apiserver sent it, so nil and empty survive; kubectl apply or
// create -f restores them (after dropping resourceVersion and uid).
package backup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/widgetry/widget-operator/internal/fielddiff"
	"github.com/widgetry/widget-operator/internal/metalist"
)

// Manifest describes a backup.
type Manifest struct {
	CRD            string         `json:"crd"`
	Time           time.Time      `json:"time"`
	Server         string         `json:"server,omitempty"`
	StorageVersion string         `json:"storageVersion"`
	StoredVersions []string       `json:"storedVersions"`
	Versions       []string       `json:"versions"`
	Objects        map[string]int `json:"objects"`
}

// Backup is a backup read back.
type Backup struct {
	Manifest
	CRD *apiextensionsv1.CustomResourceDefinition
	// Objects are the objects by version, then by UID.
	Objects map[string]map[string]*unstructured.Unstructured
}

const (
	manifestFile = "manifest.json"
	crdFile      = "crd.json"
)

func objectsFile(version string) string { return "objects." + version + ".json" }

// ErrNotEmpty: Write never writes into a directory that holds anything (another backup).
var ErrNotEmpty = errors.New("not empty")

// Write backs up every object of the CRD through every served version into dir, which must
// be empty or not exist (a backup is never overwritten: ErrNotEmpty).
func Write(ctx context.Context, c client.Client, crdName, dir, server string, now time.Time) (*Manifest, error) {
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return nil, fmt.Errorf("%s is %w: a backup is never written over another; name a new directory", dir, ErrNotEmpty)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	live, err := readCRD(ctx, c, crdName)
	if err != nil {
		return nil, err
	}
	m := &Manifest{CRD: crdName, Time: now.UTC(), Server: server, StoredVersions: live.Status.StoredVersions, Objects: map[string]int{}}
	scratch, err := drillNamespaces(ctx, c)
	if err != nil {
		return nil, err
	}
	for _, v := range live.Spec.Versions {
		if v.Storage {
			m.StorageVersion = v.Name
		}
		if !v.Served {
			continue
		}
		list, err := listAll(ctx, c, live, v.Name)
		if err != nil {
			return nil, err
		}
		list.Items = slices.DeleteFunc(list.Items, func(o unstructured.Unstructured) bool { return scratch[o.GetNamespace()] })
		if err := writeJSON(filepath.Join(dir, objectsFile(v.Name)), list); err != nil {
			return nil, err
		}
		m.Versions = append(m.Versions, v.Name)
		m.Objects[v.Name] = len(list.Items)
	}
	if err := writeJSON(filepath.Join(dir, crdFile), live); err != nil {
		return nil, err
	}
	// The manifest last: a directory without one is an interrupted backup.
	if err := writeJSON(filepath.Join(dir, manifestFile), m); err != nil {
		return nil, err
	}
	return m, nil
}

// drillNamespaces are the scratch namespaces of restore drills (DrillLabel): a backup leaves
// their copies out, or it would hold every object twice after a drill kept with --keep (or
// still terminating), and a restore would recreate the copies. Without list on namespaces
// nothing is left out.
func drillNamespaces(ctx context.Context, c client.Client) (map[string]bool, error) {
	list := &corev1.NamespaceList{}
	if err := c.List(ctx, list, client.HasLabels{DrillLabel}); err != nil {
		if apierrors.IsForbidden(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("list the restore drills' scratch namespaces: %w", err)
	}
	out := map[string]bool{}
	for _, ns := range list.Items {
		out[ns.Name] = true
	}
	return out, nil
}

// listAll lists every object through version, page by page.
func listAll(ctx context.Context, c client.Client, live *apiextensionsv1.CustomResourceDefinition, version string) (*unstructured.UnstructuredList, error) {
	all := &unstructured.UnstructuredList{}
	all.SetAPIVersion(live.Spec.Group + "/" + version)
	all.SetKind(live.Spec.Names.ListKind)
	err := metalist.EachObject(ctx, c, all.GetAPIVersion(), all.GetKind(), func(o *unstructured.Unstructured) error {
		all.Items = append(all.Items, *o)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list %s through %s: %w", live.Spec.Names.Plural, version, err)
	}
	return all, nil
}

// readCRD reads the CRD a backup is of.
func readCRD(ctx context.Context, c client.Client, name string) (*apiextensionsv1.CustomResourceDefinition, error) {
	live := &apiextensionsv1.CustomResourceDefinition{}
	if err := c.Get(ctx, client.ObjectKey{Name: name}, live); err != nil {
		return nil, fmt.Errorf("read CRD %s: %w", name, err)
	}
	return live, nil
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("write the backup: %w", err)
	}
	return nil
}

// Load reads the backup in dir.
func Load(dir string) (*Backup, error) {
	b := &Backup{Objects: map[string]map[string]*unstructured.Unstructured{}}
	raw, err := os.ReadFile(filepath.Join(dir, manifestFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s has no %s: not a backup, or one that was interrupted", dir, manifestFile)
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(raw, &b.Manifest); err != nil {
		return nil, fmt.Errorf("%s: %w", manifestFile, err)
	}
	b.CRD = &apiextensionsv1.CustomResourceDefinition{}
	if err := readJSON(filepath.Join(dir, crdFile), b.CRD); err != nil {
		return nil, err
	}
	for _, v := range b.Versions {
		list := &unstructured.UnstructuredList{}
		if err := readJSON(filepath.Join(dir, objectsFile(v)), list); err != nil {
			return nil, err
		}
		if len(list.Items) != b.Manifest.Objects[v] {
			return nil, fmt.Errorf("%s holds %d objects, the manifest says %d: the backup is damaged", objectsFile(v), len(list.Items), b.Manifest.Objects[v])
		}
		byUID := map[string]*unstructured.Unstructured{}
		for i := range list.Items {
			byUID[string(list.Items[i].GetUID())] = &list.Items[i]
		}
		b.Objects[v] = byUID
	}
	return b, nil
}

func readJSON(path string, v any) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read the backup: %w", err)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	return nil
}

// Report is what Compare found.
type Report struct {
	// Versions are the versions compared: in the backup and served now.
	Versions []string `json:"versions"`
	// Compared counts the objects compared, per version.
	Compared map[string]int `json:"compared"`
	// Missing are objects of the backup the cluster no longer has; Added, objects the backup
	// does not have (not a failure).
	Missing []string `json:"missing,omitempty"`
	Added   []string `json:"added,omitempty"`
	// Changed are "version namespace/name: path: backup != live" for every field that differs.
	Changed []string `json:"changed,omitempty"`
	// Recreated are objects of the backup deleted and created again since (by a restore, for
	// one): matched by namespace and name, their fields compared, listed with both uids.
	Recreated []string `json:"recreated,omitempty"`
}

// OK reports whether every object of the backup is still there with the same fields.
func (r *Report) OK() bool { return len(r.Missing) == 0 && len(r.Changed) == 0 }

// compared are the parts of an object that a user wrote and the upgrade must keep; status,
// resourceVersion, generation and managedFields move on their own.
func compared(o *unstructured.Unstructured) map[string]any {
	out := map[string]any{}
	if spec, ok := o.Object["spec"]; ok {
		out["spec"] = spec
	}
	md, _ := o.Object["metadata"].(map[string]any)
	kept := map[string]any{}
	for _, k := range []string{"name", "namespace", "labels", "annotations", "finalizers", "ownerReferences"} {
		if v, ok := md[k]; ok {
			kept[k] = v
		}
	}
	out["metadata"] = kept
	return out
}

// Compare reads every object through each version both the backup and the cluster serve, and
// compares it with the backup by UID, field by field (spec, name, labels, annotations,
// finalizers, owner references).
func Compare(ctx context.Context, c client.Client, b *Backup) (*Report, error) {
	live, err := readCRD(ctx, c, b.Manifest.CRD)
	if err != nil {
		return nil, err
	}
	r := &Report{Compared: map[string]int{}}
	for _, v := range live.Spec.Versions {
		if v.Served && b.Objects[v.Name] != nil {
			r.Versions = append(r.Versions, v.Name)
		}
	}
	if len(r.Versions) == 0 {
		var served []string
		for _, v := range live.Spec.Versions {
			if v.Served {
				served = append(served, v.Name)
			}
		}
		return nil, fmt.Errorf("the backup holds the objects as %v show them, the cluster serves %v: no version to compare through (take backups where both versions are served, from add-version to migrate)", b.Versions, served)
	}
	missing, added, recreated := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, v := range r.Versions {
		list, err := listAll(ctx, c, live, v)
		if err != nil {
			return nil, err
		}
		byKey := map[string]*unstructured.Unstructured{}
		for _, o := range b.Objects[v] {
			byKey[key(o)] = o
		}
		liveUIDs := map[string]bool{}
		for i := range list.Items {
			liveUIDs[string(list.Items[i].GetUID())] = true
		}
		seen := map[string]bool{}
		for i := range list.Items {
			o := &list.Items[i]
			uid := string(o.GetUID())
			seen[uid] = true
			old, ok := b.Objects[v][uid]
			if !ok {
				// The same name under a new uid is the backup's object created again, as
				// long as the backup's uid is not alive under another name.
				if old, ok = byKey[key(o)]; !ok || liveUIDs[string(old.GetUID())] {
					added[key(o)] = true
					continue
				}
				seen[string(old.GetUID())] = true
				recreated[fmt.Sprintf("%s (uid %s, was %s)", key(o), uid, old.GetUID())] = true
			}
			r.Compared[v]++
			for _, d := range fielddiff.Diff(compared(old), compared(o)) {
				r.Changed = append(r.Changed, fmt.Sprintf("%s %s: %s", v, key(o), d))
			}
		}
		for uid, o := range b.Objects[v] {
			if !seen[uid] {
				missing[key(o)+" (uid "+uid+")"] = true
			}
		}
	}
	r.Missing = slices.Sorted(maps.Keys(missing))
	r.Added = slices.Sorted(maps.Keys(added))
	r.Recreated = slices.Sorted(maps.Keys(recreated))
	slices.Sort(r.Changed)
	return r, nil
}

func key(o *unstructured.Unstructured) string {
	if o.GetNamespace() == "" {
		return o.GetName()
	}
	return o.GetNamespace() + "/" + o.GetName()
}
