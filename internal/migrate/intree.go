package migrate

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"time"

	svmv1 "k8s.io/api/storagemigration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The in-tree backend: Kubernetes 1.37 serves storagemigration.k8s.io/v1 (GA, on by
// default), and kube-controller-manager's storage-version-migrator-controller (in the
// default --controllers set, needing the garbage collector, whose informers it reuses)
// rewrites the objects of a StorageVersionMigration and then sets the CRD's storedVersions
// to [storage] itself, if the CRD's generation did not change meanwhile. So with this
// backend we never trim (it would race kube-controller-manager): we create the migration,
// wait for it, and verify the CRD afterwards.
//
// The API being served proves nothing about the controller: a control plane without
// kube-controller-manager (envtest), or one started with the controller disabled, serves
// it and never acts on it. BackendAuto therefore waits InTreeProbeTimeout for the
// controller to pick the migration up (condition Running and status.resourceVersion set),
// and otherwise deletes it and uses the client backend.

const svmPollInterval = 500 * time.Millisecond

// inTreeServed reports whether the apiserver serves StorageVersionMigrations.
func (m *Migrator) inTreeServed() (bool, error) {
	list, err := m.disc.ServerResourcesForGroupVersion(svmv1.SchemeGroupVersion.String())
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("discover %s: %w", svmv1.SchemeGroupVersion, err)
	}
	for _, r := range list.APIResources {
		if r.Name == "storageversionmigrations" {
			return true, nil
		}
	}
	return false, nil
}

// chooseBackend resolves BackendAuto. For the in-tree backend it leaves the migration's name
// in r.p; fellBack says why auto chose the client.
func (r *run) chooseBackend(ctx context.Context) (b Backend, fellBack string, err error) {
	switch r.opts.Backend {
	case BackendClient:
		return BackendClient, "", nil
	case BackendInTree:
		served, err := r.m.inTreeServed()
		if err != nil {
			return "", "", err
		}
		if !served {
			return "", "", refusef("the cluster does not serve %s StorageVersionMigrations, so --backend=in-tree cannot work: use --backend=client (or auto)", svmv1.SchemeGroupVersion)
		}
		if r.resumed && r.p.Backend == string(BackendInTree) && r.p.StorageVersionMigration != "" {
			return BackendInTree, "", nil
		}
		picked, reason, err := r.probeInTree(ctx)
		if err != nil {
			return "", "", err
		}
		if !picked {
			return "", "", fmt.Errorf("--backend=in-tree: %s; use --backend=client", reason)
		}
		return BackendInTree, "", nil
	}

	if r.resumed && r.p.Backend == string(BackendInTree) && r.p.StorageVersionMigration != "" {
		return BackendInTree, "", nil // an in-tree migration we started is still ours to wait for
	}
	served, err := r.m.inTreeServed()
	if err != nil {
		r.log.Info("using the client migrator: discovery of the in-tree StorageVersionMigration API failed", "error", err.Error())
		return BackendClient, "discovery of " + svmv1.SchemeGroupVersion.String() + " failed: " + err.Error(), nil
	}
	if !served {
		reason := "the apiserver does not serve " + svmv1.SchemeGroupVersion.String() + " StorageVersionMigrations"
		r.log.Info("using the client migrator: " + reason)
		return BackendClient, reason, nil
	}

	picked, reason, err := r.probeInTree(ctx)
	if err != nil {
		return "", "", err
	}
	if !picked {
		r.log.Info("falling back to the client migrator: " + reason)
		return BackendClient, reason, nil
	}
	return BackendInTree, "", nil
}

// probeInTree creates the StorageVersionMigration and waits InTreeProbeTimeout for
// kube-controller-manager to pick it up. If it does not, the migration is deleted (so that a
// controller started later does not run it behind our back) and reason says why.
func (r *run) probeInTree(ctx context.Context) (picked bool, reason string, err error) {
	svm, err := r.createSVM(ctx)
	if err != nil {
		return false, "", err
	}
	probeCtx, cancel := context.WithTimeout(ctx, r.opts.InTreeProbeTimeout)
	defer cancel()
	got, err := r.waitSVM(probeCtx, svm.Name, func(s *svmv1.StorageVersionMigration) bool {
		return isTerminal(s) || (meta.IsStatusConditionTrue(s.Status.Conditions, string(svmv1.MigrationRunning)) && s.Status.ResourceVersion != "")
	})
	if err == nil {
		r.log.Info("using the in-tree StorageVersionMigration: kube-controller-manager picked it up", "storageVersionMigration", svm.Name)
		return true, "", nil
	}
	if ctx.Err() != nil {
		return false, "", ctx.Err()
	}
	reason = fmt.Sprintf("the apiserver serves %s, but no controller picked up StorageVersionMigration %s within %s (is kube-controller-manager running with its storage-version-migrator-controller?)",
		svmv1.SchemeGroupVersion, svm.Name, r.opts.InTreeProbeTimeout)
	if got != nil && len(got.Status.Conditions) > 0 {
		reason += fmt.Sprintf("; its conditions: %v", got.Status.Conditions)
	}
	if err := r.m.c.Delete(context.WithoutCancel(ctx), svm); err != nil && !apierrors.IsNotFound(err) {
		r.log.Error(err, "could not delete the unclaimed StorageVersionMigration; delete it by hand", "storageVersionMigration", svm.Name)
	}
	r.p.Backend, r.p.StorageVersionMigration = string(BackendClient), ""
	return false, reason, nil
}

// createSVM creates the StorageVersionMigration and records it in the progress object, so a
// killed run waits for it instead of starting another.
func (r *run) createSVM(ctx context.Context) (*svmv1.StorageVersionMigration, error) {
	prefix := r.opts.CRD
	if len(prefix) > 200 {
		prefix = prefix[:200]
	}
	svm := &svmv1.StorageVersionMigration{
		ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-", Labels: map[string]string{"app.kubernetes.io/managed-by": FieldManager}},
		Spec:       svmv1.StorageVersionMigrationSpec{Resource: metav1.GroupResource{Group: r.t.crd.Spec.Group, Resource: r.t.crd.Spec.Names.Plural}},
	}
	if err := r.m.c.Create(ctx, svm); err != nil {
		return nil, fmt.Errorf("create a StorageVersionMigration for %s: %w", svm.Spec.Resource, err)
	}
	r.p.Backend, r.p.StorageVersionMigration = string(BackendInTree), svm.Name
	if err := r.store.save(ctx, &r.p); err != nil {
		return nil, err
	}
	return svm, nil
}

// waitSVM polls the StorageVersionMigration until done(it) or ctx ends, reporting progress.
func (r *run) waitSVM(ctx context.Context, name string, done func(*svmv1.StorageVersionMigration) bool) (*svmv1.StorageVersionMigration, error) {
	t := time.NewTicker(svmPollInterval)
	defer t.Stop()
	var last *svmv1.StorageVersionMigration
	for {
		svm := &svmv1.StorageVersionMigration{}
		err := r.m.c.Get(ctx, client.ObjectKey{Name: name}, svm)
		switch {
		case apierrors.IsNotFound(err):
			return last, fmt.Errorf("StorageVersionMigration %s was deleted while we waited for it; rerun", name)
		case err == nil:
			last = svm
			if done(svm) {
				return svm, nil
			}
		case ctx.Err() == nil:
			r.log.Info("could not read the StorageVersionMigration; retrying", "storageVersionMigration", name, "error", err.Error())
		}
		if r.opts.OnProgress != nil {
			r.opts.OnProgress(Status{CRD: r.opts.CRD, StorageVersion: r.t.storage, Backend: BackendInTree,
				Counts: r.p.Counts, Total: r.p.Total, Elapsed: time.Since(r.start), Resumed: r.resumed})
		}
		select {
		case <-ctx.Done():
			return last, ctx.Err()
		case <-t.C:
		}
	}
}

func isTerminal(s *svmv1.StorageVersionMigration) bool {
	return meta.IsStatusConditionTrue(s.Status.Conditions, string(svmv1.MigrationSucceeded)) ||
		meta.IsStatusConditionTrue(s.Status.Conditions, string(svmv1.MigrationFailed))
}

// nudgeInterval is how often nudgeWhileWaiting writes while kube-controller-manager waits.
const nudgeInterval = 5 * time.Second

// nudgeWhileWaiting returns a waitSVM condition that is true once the migration is terminal
// and, while it is not, re-encodes one object every nudgeInterval once the migration has its
// status.resourceVersion.
//
// Why: kube-controller-manager migrates only once its garbage collector's informer for the
// resource has seen that resourceVersion, and an informer's resourceVersion moves only with
// events on the resource, or with watch bookmarks about once a minute; meanwhile the
// controller retries with a growing backoff. On a quiet resource that costs one to three
// minutes. One real write (our usual no-op patch, on an object still in the old encoding)
// is an event, and the migration starts at the controller's next retry.
func (r *run) nudgeWhileWaiting() func(*svmv1.StorageVersionMigration) bool {
	var last time.Time
	exhausted := false
	return func(s *svmv1.StorageVersionMigration) bool {
		if isTerminal(s) {
			return true
		}
		if exhausted || s.Status.ResourceVersion == "" || time.Since(last) < nudgeInterval {
			return false
		}
		last = time.Now()
		exhausted = !r.rewriteOne(context.Background())
		return false
	}
}

// rewriteOne re-encodes the first listed object that is not in the storage encoding yet,
// and reports whether it found one.
func (r *run) rewriteOne(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res := r.m.meta.Resource(r.t.gvr)
	list, err := res.List(ctx, metav1.ListOptions{Limit: 20})
	if err != nil {
		return true // try again at the next interval
	}
	for _, o := range list.Items {
		patch := fmt.Appendf(nil, `{"metadata":{"resourceVersion":%q}}`, o.ResourceVersion)
		got, err := res.Namespace(o.Namespace).Patch(ctx, o.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
		if err == nil && got.ResourceVersion != o.ResourceVersion {
			return true
		}
	}
	return false
}

// verifiedRE reads the object count of kube-controller-manager's final Running message.
var verifiedRE = regexp.MustCompile(`(\d+) objects verified migrated`)

// crdVerifyTimeout bounds the wait for kube-controller-manager to update the CRD after the
// migration succeeded (it does so when it notices the terminal condition).
const crdVerifyTimeout = time.Minute

// runInTree waits for the StorageVersionMigration to finish and verifies that
// kube-controller-manager trimmed storedVersions.
func (r *run) runInTree(ctx context.Context) error {
	if r.p.StorageVersionMigration == "" {
		if _, err := r.createSVM(ctx); err != nil {
			return err
		}
	}
	name := r.p.StorageVersionMigration
	wctx := ctx
	if r.opts.InTreeTimeout > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, r.opts.InTreeTimeout)
		defer cancel()
	}
	svm, err := r.waitSVM(wctx, name, r.nudgeWhileWaiting())
	if err != nil {
		if ctx.Err() == nil && wctx.Err() != nil {
			return fmt.Errorf("StorageVersionMigration %s did not finish within %s; it keeps running in kube-controller-manager: rerun to wait for it again: %w", name, r.opts.InTreeTimeout, err)
		}
		return err
	}
	if c := meta.FindStatusCondition(svm.Status.Conditions, string(svmv1.MigrationFailed)); c != nil && c.Status == metav1.ConditionTrue {
		// The next run must start a new migration, not wait for this one again.
		r.p.StorageVersionMigration = ""
		return fmt.Errorf("kube-controller-manager's StorageVersionMigration %s failed: %s; fix the cause and rerun (or use --backend=client)", name, c.Message)
	}
	r.p.LastProgressTime = time.Now()
	if c := meta.FindStatusCondition(svm.Status.Conditions, string(svmv1.MigrationRunning)); c != nil {
		if m := verifiedRE.FindStringSubmatch(c.Message); m != nil {
			r.p.Total, _ = strconv.ParseInt(m[1], 10, 64)
		}
	}
	if r.p.Total == 0 {
		r.p.Total = r.countObjects(ctx)
	}
	r.p.Counts = Counts{Migrated: r.p.Total}
	return r.verifyInTreeTrim(ctx, name)
}

// countObjects counts the resource's objects with a one-item LIST (remainingItemCount).
func (r *run) countObjects(ctx context.Context) int64 {
	list, err := r.m.meta.Resource(r.t.gvr).List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return 0
	}
	n := int64(len(list.Items))
	if rem := list.GetRemainingItemCount(); rem != nil {
		n += *rem
	}
	return n
}

// verifyInTreeTrim waits for kube-controller-manager to end the CRD's StorageMigrating
// condition and checks that storedVersions is [storage] under an unchanged spec.
func (r *run) verifyInTreeTrim(ctx context.Context, svmName string) error {
	ctx, cancel := context.WithTimeout(ctx, crdVerifyTimeout)
	defer cancel()
	t := time.NewTicker(svmPollInterval)
	defer t.Stop()
	for {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		err := r.m.c.Get(ctx, client.ObjectKey{Name: r.opts.CRD}, crd)
		if err == nil {
			if err := checkTrim(crd, TrimExpectation{StorageVersion: r.t.storage, Generation: r.p.CRDGeneration,
				StoredVersionsAtStart: r.p.StoredVersionsAtStart}); err != nil {
				return err
			}
			if slices.Equal(crd.Status.StoredVersions, []string{r.t.storage}) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			msg := "no StorageMigrating condition"
			for _, c := range crd.Status.Conditions {
				if c.Type == apiextensionsv1.StorageMigrating {
					msg = fmt.Sprintf("StorageMigrating=%s %s: %s", c.Status, c.Reason, c.Message)
				}
			}
			return fmt.Errorf("StorageVersionMigration %s succeeded, but kube-controller-manager left storedVersions of CRD %s as %v (%s); rerun, or run with --backend=client which trims itself",
				svmName, r.opts.CRD, crd.Status.StoredVersions, msg)
		case <-t.C:
		}
	}
}
