package backup

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/widgetry/widget-operator/internal/fielddiff"
)

// DrillLabel marks the scratch namespaces of a restore drill; its value is the drill's prefix.
const DrillLabel = "widgetry.io/restore-drill"

// ErrDrillNamespaceExists: a drill writes only into namespaces it created.
var ErrDrillNamespaceExists = errors.New("the scratch namespace exists")

// DrillOptions shape a Drill.
type DrillOptions struct {
	// Prefix names the scratch namespaces: the backup's namespaces, sorted, become
	// <Prefix>-0, <Prefix>-1, ...
	Prefix string
	// Keep leaves the scratch namespaces for inspection; by default they are deleted.
	Keep bool
	// Dir is where the backup was read from (recorded).
	Dir string
	Now time.Time
}

// DrillReport is what a drill found.
type DrillReport struct {
	// BackupTime identifies the backup drilled (its manifest's time).
	BackupTime time.Time `json:"backupTime"`
	Dir        string    `json:"dir,omitempty"`
	Time       time.Time `json:"time"`
	// Version is the version the objects were created through.
	Version string `json:"version"`
	// Namespaces maps each namespace of the backup to its scratch namespace.
	Namespaces map[string]string `json:"namespaces"`
	// Objects counts the objects created in the scratch namespaces.
	Objects int `json:"objects"`
	// Checked counts, per version, the objects read back and compared with the backup.
	Checked map[string]int `json:"checked"`
	// Failed are the objects that could not be created or read back as backed up.
	Failed []string `json:"failed,omitempty"`
	// Kept says the scratch namespaces were left in place.
	Kept bool `json:"kept,omitempty"`
}

// OK reports whether every object was created and read back as the backup has it through
// every version compared.
func (r *DrillReport) OK() bool {
	if len(r.Failed) > 0 || len(r.Checked) == 0 && r.Objects > 0 {
		return false
	}
	for _, n := range r.Checked {
		if n != r.Objects {
			return false
		}
	}
	return true
}

// Drill proves a backup restorable without touching the objects it was taken from: it
// creates every object of the backup in scratch namespaces of its own (the objects as the
// restore would write them, through the same version, without finalizers and owner
// references, whose owners are elsewhere), reads each back through every version the backup
// and the cluster both serve and compares spec, labels and annotations with what the backup
// holds for that version (the conversion of the stored object both ways, as a restore would
// need it), then deletes the scratch namespaces.
func Drill(ctx context.Context, c client.Client, b *Backup, opts DrillOptions) (*DrillReport, error) {
	live, version, err := restoreTarget(ctx, c, b)
	if err != nil {
		return nil, err
	}
	r := &DrillReport{BackupTime: b.Time, Dir: opts.Dir, Time: opts.Now.UTC(), Version: version,
		Namespaces: map[string]string{}, Checked: map[string]int{}, Kept: opts.Keep}
	objects := sortedByKey(b.Objects[version])
	for _, o := range objects {
		if o.GetNamespace() == "" {
			return nil, fmt.Errorf("%s %s is cluster-scoped: a drill restores namespaced objects only", live.Spec.Names.Kind, o.GetName())
		}
		r.Namespaces[o.GetNamespace()] = ""
	}
	for i, ns := range slices.Sorted(maps.Keys(r.Namespaces)) {
		r.Namespaces[ns] = fmt.Sprintf("%s-%d", opts.Prefix, i)
	}
	var created []string
	if !opts.Keep {
		defer func() {
			for _, ns := range created {
				// Background: the drill does not wait for the namespace controller.
				_ = c.Delete(context.WithoutCancel(ctx), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, client.PropagationPolicy(metav1.DeletePropagationBackground))
			}
		}()
	}
	for _, src := range slices.Sorted(maps.Keys(r.Namespaces)) {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.Namespaces[src], Labels: map[string]string{DrillLabel: opts.Prefix}}}
		if err := c.Create(ctx, ns); err != nil {
			if apierrors.IsAlreadyExists(err) {
				return nil, fmt.Errorf("%w: %s; a drill writes only into namespaces it creates: name another --drill-prefix, or delete the namespaces of an earlier drill (kubectl delete namespace -l %s)", ErrDrillNamespaceExists, ns.Name, DrillLabel)
			}
			return nil, fmt.Errorf("create the scratch namespace %s: %w", ns.Name, err)
		}
		created = append(created, ns.Name)
	}
	for _, old := range objects {
		fields := userFields(old)
		md := fields["metadata"].(map[string]any)
		md["namespace"] = r.Namespaces[old.GetNamespace()]
		delete(md, "finalizers")
		delete(md, "ownerReferences")
		obj := &unstructured.Unstructured{Object: fields}
		obj.SetAPIVersion(live.Spec.Group + "/" + version)
		obj.SetKind(live.Spec.Names.Kind)
		if err := c.Create(ctx, obj); err != nil {
			r.Failed = append(r.Failed, fmt.Sprintf("%s: create through %s: %v", key(old), version, err))
			continue
		}
		r.Objects++
	}
	back := map[string]string{}
	for src, scratch := range r.Namespaces {
		back[scratch] = src
	}
	for _, v := range live.Spec.Versions {
		if !v.Served || b.Objects[v.Name] == nil {
			continue
		}
		byKey := map[string]*unstructured.Unstructured{}
		for _, o := range b.Objects[v.Name] {
			byKey[key(o)] = o
		}
		for _, scratch := range created {
			list := &unstructured.UnstructuredList{}
			list.SetAPIVersion(live.Spec.Group + "/" + v.Name)
			list.SetKind(live.Spec.Names.ListKind)
			if err := c.List(ctx, list, client.InNamespace(scratch)); err != nil {
				r.Failed = append(r.Failed, fmt.Sprintf("list namespace %s through %s: %v", scratch, v.Name, err))
				continue
			}
			for i := range list.Items {
				got := &list.Items[i]
				k := back[scratch] + "/" + got.GetName()
				want, ok := byKey[k]
				if !ok {
					r.Failed = append(r.Failed, fmt.Sprintf("%s %s/%s: not in the backup as %s shows it", v.Name, scratch, got.GetName(), v.Name))
					continue
				}
				r.Checked[v.Name]++
				for _, d := range fielddiff.Diff(drilled(want), drilled(got)) {
					r.Failed = append(r.Failed, fmt.Sprintf("%s %s: %s", v.Name, k, d))
				}
			}
		}
	}
	for v, n := range r.Checked {
		if n != r.Objects {
			r.Failed = append(r.Failed, fmt.Sprintf("%s: %d of the %d objects created read back", v, n, r.Objects))
		}
	}
	slices.Sort(r.Failed)
	return r, nil
}

// drilled are the fields a drill compares: those a restore writes, apart from the namespace,
// finalizers and owner references it cannot take into a scratch namespace.
func drilled(o *unstructured.Unstructured) map[string]any {
	c := compared(o)
	md := c["metadata"].(map[string]any)
	delete(md, "namespace")
	delete(md, "finalizers")
	delete(md, "ownerReferences")
	return c
}
