package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"helm.sh/helm/v4/pkg/release"
	"helm.sh/helm/v4/pkg/release/common"
	releasev1 "helm.sh/helm/v4/pkg/release/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	v1 "github.com/widgetry/widget-operator/api/v1"

	"github.com/widgetry/widget-operator/internal/releasemigrate"
	"github.com/widgetry/widget-operator/internal/releasestatus"
)

// NewMigrateReleaseCommand builds `widgetctl migrate-release`.
func NewMigrateReleaseCommand(g *GlobalOptions) *cobra.Command {
	var dryRun bool
	var backupDir, fieldManager string
	cmd := &cobra.Command{
		Use:   "migrate-release NAME -n NAMESPACE [--dry-run]",
		Short: "Rewrite a Helm release's stored manifests from v1alpha1 Widgets to v1, as helm-mapkubeapis does",
		Long: `migrate-release rewrites every stored revision of Helm release NAME whose manifest declares a
Widget through widgetry.io/v1alpha1: each such Widget becomes the same Widget through v1,
converted by this build's conversion (what the apiserver already stores). Helm diffs upgrades
and rollbacks against the stored manifest; once v1alpha1 is removed from the CRD, a stored
v1alpha1 Widget makes them fail ("unable to build kubernetes objects from current release
manifest"). Nothing in the cluster changes but the release records; move the chart's
templates to widgetry.io/v1 as well, or the next upgrade writes v1alpha1 again.

A release Helm applies server-side (Helm 4's default) also needs its field ownership back:
the managedFields entries recorded through v1alpha1 are dropped before remove (the chart's
unserve hook does), after which Helm's next apply of a changed field conflicts with
"before-first-apply". For the current revision of such a release, migrate-release applies
each rewritten Widget through v1 as Helm's field manager (--field-manager), forcing ownership
of the fields the manifest sets, with Helm's ownership labels and annotations: exactly what
Helm's next upgrade of the same manifest would apply.

It first writes each record it rewrites to --backup-dir (restore one with kubectl -n NAMESPACE
replace -f FILE), refuses while Helm is changing the release (a pending status), and refuses,
rewriting nothing, when a Widget cannot be converted (a field v1alpha1 does not have), naming
it and its template. --dry-run prints the change of each Widget and writes nothing. The
release is read with HELM_DRIVER (secret, the default, or configmap).`,
		Example: `  kubectl widget census
  kubectl widget migrate-release shop -n shop --dry-run
  kubectl widget migrate-release shop -n shop`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			ns := g.Namespace()
			rc, err := g.RESTConfig()
			if err != nil {
				return err
			}
			cs, err := g.Clientset(rc)
			if err != nil {
				return err
			}
			driver := os.Getenv("HELM_DRIVER")
			st, err := releasestatus.ReleaseStorage(cs, ns, driver)
			if err != nil {
				return refused(err)
			}
			history, err := st.History(name)
			if err != nil {
				return refused(fmt.Errorf("read Helm release %s in namespace %s: %w (is -n its namespace, and HELM_DRIVER the driver it is stored with?)", name, ns, err))
			}
			type rewrite struct {
				rel      *releasev1.Release
				manifest string
			}
			var todo []rewrite
			var changes []releasemigrate.Change
			for _, r := range history {
				rel, ok := r.(*releasev1.Release)
				if !ok {
					return fmt.Errorf("the Helm release %s is stored in a format this widgetctl does not read (%T)", name, r)
				}
				if rel.Info != nil && rel.Info.Status.IsPending() {
					return refused(fmt.Errorf("the Helm release %s/%s revision %d is %s: Helm is changing it; wait until it ends, then rerun", ns, name, rel.Version, rel.Info.Status))
				}
				manifest, c, err := releasemigrate.Rewrite(rel)
				if err != nil {
					return refused(fmt.Errorf("the Helm release %s/%s: %w", ns, name, err))
				}
				if len(c) > 0 {
					todo = append(todo, rewrite{rel: rel, manifest: manifest})
					changes = append(changes, c...)
				}
			}
			if changes == nil {
				changes = []releasemigrate.Change{}
			}
			if dryRun || len(todo) == 0 {
				return printReport(g, changes, func() {
					printReleaseChanges(g.Stdout, changes)
					if len(todo) == 0 {
						fmt.Fprintf(g.Stdout, "nothing to do: no revision of Helm release %s/%s declares a Widget through v1alpha1\n", ns, name)
					} else {
						fmt.Fprintf(g.Stdout, "dry run: %d Widget(s) in %d revision(s) of Helm release %s/%s would be rewritten to v1; nothing was written\n", len(changes), len(todo), ns, name)
					}
				})
			}
			if backupDir == "" {
				backupDir = fmt.Sprintf("%s.%s.release-backup-%s", ns, name, time.Now().UTC().Format("20060102-150405"))
			}
			if entries, err := os.ReadDir(backupDir); err == nil && len(entries) > 0 {
				return refused(fmt.Errorf("%s is not empty: a backup is never written over another; name a new --backup-dir", backupDir))
			}
			if err := os.MkdirAll(backupDir, 0o700); err != nil {
				return err
			}
			for _, t := range todo {
				key := fmt.Sprintf("sh.helm.release.v1.%s.v%d", name, t.rel.Version)
				if err := backupRecord(cmd, cs, driver, ns, key, backupDir); err != nil {
					return fmt.Errorf("back up the release record %s/%s (nothing rewritten yet): %w", ns, key, err)
				}
			}
			for i, t := range todo {
				t.rel.Manifest = t.manifest
				if err := st.Update(t.rel); err != nil {
					return fmt.Errorf("rewrite revision %d of Helm release %s/%s (%d of %d revisions rewritten; the records are backed up in %s): %w", t.rel.Version, ns, name, i, len(todo), backupDir, err)
				}
			}
			owned, err := takeOverFields(cmd, rc, history, changes, ns, name, fieldManager)
			if err != nil {
				return fmt.Errorf("the release records are rewritten (backed up in %s), but: %w", backupDir, err)
			}
			return printReport(g, changes, func() {
				printReleaseChanges(g.Stdout, changes)
				fmt.Fprintf(g.Stdout, "rewrote %d Widget(s) in %d revision(s) of Helm release %s/%s to v1; the records before are in %s (kubectl -n %s replace -f FILE puts one back)\n",
					len(changes), len(todo), ns, name, backupDir, ns)
				for _, o := range owned {
					fmt.Fprintf(g.Stdout, "applied Widget %s through v1 as field manager %s (the release is applied server-side): Helm's next upgrade owns its fields again\n", o, fieldManager)
				}
			})
		},
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print the change of each Widget and write nothing")
	cmd.Flags().StringVar(&fieldManager, "field-manager", "helm", "for a release Helm applies server-side (Helm 4's default): the field manager Helm applies as")
	cmd.Flags().StringVar(&backupDir, "backup-dir", "", "directory to write the release records to before rewriting them; must be empty or new (default <namespace>.<name>.release-backup-<time>)")
	return cmd
}

// backupRecord writes Helm's record key (a Secret or a ConfigMap) to dir, without the fields
// that would make kubectl replace conflict.
func backupRecord(cmd *cobra.Command, cs kubernetes.Interface, driver, ns, key, dir string) error {
	var obj runtime.Object
	var meta *metav1.ObjectMeta
	switch driver {
	case "configmap", "configmaps":
		cm, err := cs.CoreV1().ConfigMaps(ns).Get(cmd.Context(), key, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cm.APIVersion, cm.Kind = "v1", "ConfigMap"
		obj, meta = cm, &cm.ObjectMeta
	default:
		s, err := cs.CoreV1().Secrets(ns).Get(cmd.Context(), key, metav1.GetOptions{})
		if err != nil {
			return err
		}
		s.APIVersion, s.Kind = "v1", "Secret"
		obj, meta = s, &s.ObjectMeta
	}
	meta.ResourceVersion, meta.UID, meta.ManagedFields, meta.CreationTimestamp = "", "", nil, metav1.Time{}
	b, err := json.MarshalIndent(obj, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, key+".json"), append(b, '\n'), 0o600)
}

func printReleaseChanges(w io.Writer, changes []releasemigrate.Change) {
	for _, c := range changes {
		fmt.Fprintf(w, "revision %d: Widget %s (%s)\n", c.Revision, c.Object, c.Source)
		for _, l := range strings.Split(strings.TrimRight(c.Before, "\n"), "\n") {
			fmt.Fprintln(w, "- "+l)
		}
		for _, l := range strings.Split(strings.TrimRight(c.After, "\n"), "\n") {
			fmt.Fprintln(w, "+ "+l)
		}
	}
}

// takeOverFields applies, for a release Helm applies server-side, every rewritten Widget of
// its current revision through v1 as Helm's field manager, forcing ownership, and returns
// "namespace/name" of each. A Widget no longer in the cluster is left to Helm to create.
func takeOverFields(cmd *cobra.Command, rc *rest.Config, history []release.Releaser, changes []releasemigrate.Change, ns, name, fieldManager string) ([]string, error) {
	var current *releasev1.Release
	for _, r := range history {
		if rel, ok := r.(*releasev1.Release); ok && rel.Info != nil && rel.Info.Status == common.StatusDeployed {
			current = rel
		}
	}
	if current == nil || current.ApplyMethod != string(releasev1.ApplyMethodServerSideApply) {
		return nil, nil
	}
	dc, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	gvr := v1.GroupVersion.WithResource("widgets")
	var owned []string
	for _, c := range changes {
		if c.Revision != current.Version {
			continue
		}
		obj := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(c.After), &obj.Object); err != nil {
			return owned, err
		}
		wns := obj.GetNamespace()
		if wns == "" {
			wns = ns
		}
		obj.SetNamespace(wns)
		labels := obj.GetLabels()
		if labels == nil {
			labels = map[string]string{}
		}
		labels["app.kubernetes.io/managed-by"] = "Helm"
		obj.SetLabels(labels)
		annotations := obj.GetAnnotations()
		if annotations == nil {
			annotations = map[string]string{}
		}
		annotations["meta.helm.sh/release-name"], annotations["meta.helm.sh/release-namespace"] = name, ns
		obj.SetAnnotations(annotations)
		res := dc.Resource(gvr).Namespace(wns)
		if _, err := res.Get(cmd.Context(), obj.GetName(), metav1.GetOptions{}); apierrors.IsNotFound(err) {
			continue
		}
		applied, err := res.Apply(cmd.Context(), obj.GetName(), obj, metav1.ApplyOptions{FieldManager: fieldManager, Force: true})
		if err != nil {
			return owned, fmt.Errorf("apply Widget %s/%s through v1 as field manager %s: %w", wns, obj.GetName(), fieldManager, err)
		}
		// With no entries left, the apiserver recorded the fields as they were under
		// "before-first-apply", and that co-owner would still conflict with Helm's next change
		// of a value: the fields are Helm's alone.
		if err := dropManager(cmd, res, applied, "before-first-apply"); err != nil {
			return owned, fmt.Errorf("the Widget %s/%s: %w", wns, obj.GetName(), err)
		}
		owned = append(owned, wns+"/"+obj.GetName())
	}
	return owned, nil
}

// dropManager removes manager's managedFields entries from obj, if it has any, as long as obj
// did not change since it was read.
func dropManager(cmd *cobra.Command, res dynamic.ResourceInterface, obj *unstructured.Unstructured, manager string) error {
	entries := obj.GetManagedFields()
	kept := slices.DeleteFunc(slices.Clone(entries), func(e metav1.ManagedFieldsEntry) bool { return e.Manager == manager })
	if len(kept) == len(entries) {
		return nil
	}
	patch, err := json.Marshal([]map[string]any{
		{"op": "test", "path": "/metadata/resourceVersion", "value": obj.GetResourceVersion()},
		{"op": "replace", "path": "/metadata/managedFields", "value": kept},
	})
	if err != nil {
		return err
	}
	if _, err := res.Patch(cmd.Context(), obj.GetName(), types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("drop the managedFields entry of %s (rerun migrate-release after a conflict): %w", manager, err)
	}
	return nil
}
