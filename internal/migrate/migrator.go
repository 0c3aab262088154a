package migrate

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/widgetry/widget-operator/internal/gatestate"
	"github.com/widgetry/widget-operator/internal/scheme"
)

// Backend selects who rewrites the objects.
type Backend string

const (
	// BackendAuto uses the in-tree backend when the cluster's StorageVersionMigration API is
	// served and a migration created through it is seen progressing within
	// Options.InTreeProbeTimeout; otherwise the client backend.
	BackendAuto Backend = "auto"
	// BackendClient rewrites the objects from this process and trims storedVersions itself.
	BackendClient Backend = "client"
	// BackendInTree creates a storagemigration.k8s.io/v1 StorageVersionMigration and lets
	// kube-controller-manager rewrite the objects and trim storedVersions; this process waits
	// for it and verifies the result.
	BackendInTree Backend = "in-tree"
)

// Defaults of Options and of widgetctl's flags.
const (
	DefaultConcurrency        = 8
	DefaultPageSize           = 500
	DefaultMaxErrors          = 100
	DefaultInTreeProbeTimeout = 30 * time.Second
	DefaultProgressInterval   = 500 * time.Millisecond
	// DefaultQPS and DefaultBurst are widgetctl's client-side limits. They are high on
	// purpose: eight workers doing one write each are bounded by apiserver latency well below
	// them, and the apiserver's own API Priority and Fairness is what protects it (its 429
	// answers carry Retry-After, which client-go honours). Lower them with --qps/--burst on a
	// cluster whose flow schemas give this client a generous share.
	DefaultQPS   = 500
	DefaultBurst = 1000
	// FieldManager names this migrator in audit logs. Its writes change no field, so it never
	// appears in managedFields.
	FieldManager = "widgetctl-migrate"
)

// Options configure one migration.
type Options struct {
	// CRD is the name of the CustomResourceDefinition, e.g. widgets.widgetry.io.
	CRD string
	// To, if set, must be the CRD's storage version: a reverse migration is asked for by
	// making the older version the storage version first, then migrating "to" it. The check
	// guards against migrating to a version the caller did not mean.
	To string
	// Backend defaults to BackendAuto.
	Backend Backend
	// Concurrency is the number of objects written at once (DefaultConcurrency).
	Concurrency int
	// PageSize is the LIST limit (DefaultPageSize).
	PageSize int64
	// StatusSubresource requires the rewrite to go through the status subresource: the run is
	// refused if the CRD has none. Without it the rewrite goes through the status subresource
	// whenever the CRD has one anyway (see target.viaStatus), and through the main resource
	// otherwise.
	StatusSubresource bool
	// ProgressNamespace holds the progress ConfigMap (see ProgressObjectName). Required.
	ProgressNamespace string
	// MaxErrors stops the run once this many objects failed (DefaultMaxErrors); a broken
	// conversion webhook would otherwise fail every object slowly.
	MaxErrors int64
	// InTreeProbeTimeout bounds how long BackendAuto waits to see an in-tree migration make
	// progress before falling back to the client (DefaultInTreeProbeTimeout).
	InTreeProbeTimeout time.Duration
	// InTreeTimeout bounds the whole in-tree migration; zero means no bound beyond ctx.
	InTreeTimeout time.Duration
	// Holder identifies this run in the progress object; defaults to hostname/pid.
	Holder string
	// OnProgress, if set, is called every ProgressInterval (DefaultProgressInterval) during
	// the run and once at its end, from one goroutine at a time.
	OnProgress       func(Status)
	ProgressInterval time.Duration
	// Logger receives structured events (resume, fall back, 410 restart, trim...).
	Logger logr.Logger
	// Seal marks this run's checkpoints as the chart's migrate hook's (KeySealedBy), so that a
	// later run may resume from them. Only the hook's ServiceAccount may write the key (the
	// chart's gate-state guard); a run by hand leaves it empty, and its checkpoints resume
	// nothing: an interrupted run by hand is followed by a full pass.
	Seal string
	// NoTrim leaves status.storedVersions alone after a client migration (for callers that
	// trim themselves, and for benchmarks).
	NoTrim bool
}

// Status is a snapshot of a running migration, for progress display.
type Status struct {
	CRD, StorageVersion string
	Backend             Backend
	Counts              Counts
	// Total is an estimate of the objects to do (0 when not known yet).
	Total int64
	// Elapsed is the time since this run (not the first attempt) started; Counts include the
	// objects of earlier attempts when Resumed.
	Elapsed time.Duration
	// DoneThisRun counts the objects this run did (for its rate).
	DoneThisRun int64
	Resumed     bool
	Finished    bool
}

// Result summarises a finished migration.
type Result struct {
	CRD, StorageVersion string
	Backend             Backend
	// Counts are this migration's outcomes, including earlier attempts it resumed.
	Counts Counts
	Total  int64
	// Duration is this run's wall time; Rate is objects per second of this run.
	Duration time.Duration
	Rate     float64
	Resumed  bool
	// NothingToDo is set when storedVersions was already just the storage version.
	NothingToDo bool
	// StoredVersions is the CRD's status.storedVersions at the end.
	StoredVersions []string
	// FellBack explains why BackendAuto chose the client backend, if it did.
	FellBack string
}

// Migrator migrates the stored objects of CRDs. It is safe for sequential use.
type Migrator struct {
	cfg  *rest.Config
	c    client.Client
	meta metadata.Interface
	disc discovery.DiscoveryInterface
}

// RecordReason makes every ConfigMap and Secret the Migrator writes (its progress object)
// carry reason in the guard's annotation (internal/gatestate): a run by hand passes the
// chart's gate-state guard only so.
func (m *Migrator) RecordReason(reason string) { m.c = gatestate.RecordingReason(m.c, reason) }

// New builds a Migrator. cfg's QPS and Burst apply to all its requests; leave them at zero
// for client-go's defaults (5/10), which are far too low for migration: set DefaultQPS and
// DefaultBurst, or the caller's flags.
func New(cfg *rest.Config) (*Migrator, error) {
	cfg = rest.CopyConfig(cfg)
	c, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		return nil, fmt.Errorf("create the Kubernetes client: %w", err)
	}
	meta, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("create the metadata client: %w", err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("create the discovery client: %w", err)
	}
	return &Migrator{cfg: cfg, c: c, meta: meta, disc: disc}, nil
}

// target is what one migration works on, read from the CRD at the start.
type target struct {
	crd        *apiextensionsv1.CustomResourceDefinition
	storage    string
	gvr        schema.GroupVersionResource // the version requests use
	namespaced bool
	// viaStatus: gvr's version has the status subresource, so the rewrites go through it. A
	// write there re-encodes the object in the storage version like any other, but admission
	// webhooks registered for the main resource never see it, so they can neither block the
	// rewrite (a webhook refusing an object stored before its rules, or while it was absent,
	// would fail the migration) nor change the object on the way.
	viaStatus     bool
	storedAtStart []string
	generation    int64
	uid           string
}

// Migrate rewrites every stored object of opts.CRD in its storage version, then trims
// status.storedVersions to [storage] (client backend) or verifies that
// kube-controller-manager did (in-tree backend). A killed run leaves its progress object
// in phase Running; the next run resumes from its last checkpoint. Refusals are
// *RefusedError (see IsRefused).
func (m *Migrator) Migrate(ctx context.Context, opts Options) (*Result, error) {
	opts = withDefaults(opts)
	log := opts.Logger.WithValues("crd", opts.CRD)
	if opts.CRD == "" {
		return nil, refusef("no CRD given: pass --crd NAME (kubectl get crd lists them)")
	}
	if opts.ProgressNamespace == "" {
		return nil, refusef("no namespace for the progress object given: pass --progress-namespace")
	}
	switch opts.Backend {
	case BackendAuto, BackendClient, BackendInTree:
	default:
		return nil, refusef("unknown backend %q: use auto, client or in-tree", opts.Backend)
	}

	t, err := m.readTarget(ctx, opts)
	if err != nil {
		return nil, err
	}
	store := newProgressStore(m.c, opts.ProgressNamespace, opts.CRD)
	prev, havePrev, err := store.load(ctx)
	if err != nil {
		return nil, err
	}
	resume := havePrev && canResume(prev, t)
	if havePrev && (prev.Phase == PhaseRunning || prev.Phase == PhaseFailed) && !resume {
		log.Info("not resuming the earlier migration, a full pass instead: its checkpoint is not of this CRD as it is now (the CRD changed or was recreated since, or the checkpoint was written by something else)",
			"previousStorageVersion", prev.StorageVersion, "storageVersion", t.storage,
			"previousGeneration", prev.CRDGeneration, "generation", t.generation, "previousUID", prev.CRDUID, "uid", t.uid)
	}
	if !resume && slices.Equal(t.crd.Status.StoredVersions, []string{t.storage}) {
		log.Info("nothing to migrate: storedVersions already lists only the storage version", "storageVersion", t.storage)
		return &Result{CRD: opts.CRD, StorageVersion: t.storage, Backend: opts.Backend, NothingToDo: true,
			StoredVersions: t.crd.Status.StoredVersions}, nil
	}

	p := Progress{
		CRD: opts.CRD, Group: t.crd.Spec.Group, Resource: t.crd.Spec.Names.Plural,
		StorageVersion: t.storage, CRDGeneration: t.generation, CRDUID: t.uid, StoredVersionsAtStart: t.storedAtStart,
		Phase: PhaseRunning, Holder: opts.Holder, StartTime: time.Now(), LastProgressTime: time.Now(), Attempts: 1,
		SealedBy: opts.Seal,
	}
	if resume {
		// The trim check compares with the CRD as it was when the migration first started.
		p = prev
		p.Phase, p.Holder, p.Message, p.CompletionTime, p.SealedBy = PhaseRunning, opts.Holder, "", time.Time{}, opts.Seal
		p.Attempts++
		log.Info("resuming the earlier migration from its last checkpoint", "previousHolder", prev.Holder,
			"backend", prev.Backend, "done", prev.Counts.Done(), "lastKey", prev.LastKey,
			"lastProgress", prev.LastProgressTime.Format(time.RFC3339))
	}

	run := &run{m: m, opts: opts, log: log, t: t, store: store, p: p, resumed: resume, start: time.Now(), baseCounts: p.Counts}
	return run.execute(ctx)
}

// canResume reports whether a progress object describes an unfinished migration of the
// same CRD spec: the same CRD (its uid: one deleted and created again starts at generation 1
// too), storage version and generation (any spec change may have moved the storage version
// and back, so a partial run before it proves nothing). A checkpoint without the uid (written
// by hand, or by an older widgetctl) never resumes: a full pass is always safe, a skip is not.
// Nor does one without the seal (KeySealedBy) only the chart's migrate hook can write.
func canResume(p Progress, t *target) bool {
	return (p.Phase == PhaseRunning || p.Phase == PhaseFailed) && p.StorageVersion == t.storage && p.CRDGeneration == t.generation &&
		p.CRDUID != "" && p.CRDUID == t.uid && (p.SealedBy != "" || !requireSeal)
}

// requireSeal is false only in tests that show what the seal prevents (export_test.go).
var requireSeal = true

func withDefaults(o Options) Options {
	if o.Backend == "" {
		o.Backend = BackendAuto
	}
	if o.Concurrency <= 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.PageSize <= 0 {
		o.PageSize = DefaultPageSize
	}
	if o.MaxErrors <= 0 {
		o.MaxErrors = DefaultMaxErrors
	}
	if o.InTreeProbeTimeout <= 0 {
		o.InTreeProbeTimeout = DefaultInTreeProbeTimeout
	}
	if o.ProgressInterval <= 0 {
		o.ProgressInterval = DefaultProgressInterval
	}
	if o.Holder == "" {
		host, _ := os.Hostname()
		o.Holder = fmt.Sprintf("%s/%d", host, os.Getpid())
	}
	if o.Logger.GetSink() == nil {
		o.Logger = logr.Discard()
	}
	return o
}

// readTarget reads the CRD and checks the preconditions of a migration.
func (m *Migrator) readTarget(ctx context.Context, opts Options) (*target, error) {
	c := &apiextensionsv1.CustomResourceDefinition{}
	if err := m.c.Get(ctx, client.ObjectKey{Name: opts.CRD}, c); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, refusef("CRD %s does not exist: check the name with 'kubectl get crd'", opts.CRD)
		}
		return nil, fmt.Errorf("read CRD %s: %w", opts.CRD, err)
	}
	storage, _ := apihelpers.GetCRDStorageVersion(c) // "" for none: refused below
	if storage == "" {
		return nil, refusef("CRD %s marks no version as storage: fix spec.versions", opts.CRD)
	}
	if opts.To != "" && !slices.ContainsFunc(c.Spec.Versions, func(v apiextensionsv1.CustomResourceDefinitionVersion) bool { return v.Name == opts.To }) {
		var names []string
		for _, v := range c.Spec.Versions {
			names = append(names, v.Name)
		}
		return nil, refusef("CRD %s has no version %s (it has %s): check --to", opts.CRD, opts.To, strings.Join(names, ", "))
	}
	if opts.To != "" && opts.To != storage {
		return nil, refusef("CRD %s stores %s, not %s: make %s the storage version first (%s), then rerun",
			opts.CRD, storage, opts.To, opts.To, storagePatchHint(c, opts.To))
	}
	t := &target{crd: c, storage: storage, namespaced: c.Spec.Scope == apiextensionsv1.NamespaceScoped,
		storedAtStart: slices.Clone(c.Status.StoredVersions), generation: c.Generation, uid: string(c.UID)}
	var served []string
	for _, v := range c.Spec.Versions {
		if v.Served {
			served = append(served, v.Name)
		}
	}
	if len(served) == 0 {
		return nil, refusef("CRD %s serves no version, so its objects cannot be read: serve %s first", opts.CRD, storage)
	}
	// Requests in the storage version need no conversion on the way in or out for objects
	// already stored in it; any served version re-encodes all the same.
	version := served[0]
	if slices.Contains(served, storage) {
		version = storage
	}
	t.gvr = schema.GroupVersionResource{Group: c.Spec.Group, Version: version, Resource: c.Spec.Names.Plural}
	// Subresources are per version: the one requests use is the one that counts.
	for _, v := range c.Spec.Versions {
		if v.Name == version {
			t.viaStatus = v.Subresources != nil && v.Subresources.Status != nil
		}
	}
	if opts.StatusSubresource && !t.viaStatus {
		return nil, refusef("CRD %s version %s has no status subresource, so --status-subresource cannot write through it: drop the flag", opts.CRD, version)
	}
	return t, nil
}

// storagePatchHint is the kubectl command that makes version the storage version.
func storagePatchHint(c *apiextensionsv1.CustomResourceDefinition, version string) string {
	var ops []string
	for i, v := range c.Spec.Versions {
		if v.Storage != (v.Name == version) {
			ops = append(ops, fmt.Sprintf(`{"op":"replace","path":"/spec/versions/%d/storage","value":%t}`, i, v.Name == version))
		}
	}
	if len(ops) == 0 || !slices.ContainsFunc(c.Spec.Versions, func(v apiextensionsv1.CustomResourceDefinitionVersion) bool { return v.Name == version }) {
		return fmt.Sprintf("CRD %s has no version %s", c.Name, version)
	}
	return fmt.Sprintf("kubectl patch crd %s --type=json -p '[%s]'", c.Name, strings.Join(ops, ","))
}

// run is one execution of Migrate.
type run struct {
	m       *Migrator
	opts    Options
	log     logr.Logger
	t       *target
	store   *progressStore
	p       Progress
	resumed bool
	start   time.Time
	// baseCounts are the outcomes of the attempts this run resumed.
	baseCounts Counts
}

func (r *run) execute(ctx context.Context) (*Result, error) {
	backend, fellBack, err := r.chooseBackend(ctx)
	if err != nil {
		if r.store.cm != nil { // the in-tree probe recorded a migration: record its end too
			r.p.Phase, r.p.CompletionTime, r.p.Message = PhaseFailed, time.Now(), err.Error()
			if serr := r.store.save(context.WithoutCancel(ctx), &r.p); serr != nil {
				r.log.Error(serr, "could not record the end of the migration")
			}
		}
		return nil, err
	}
	r.p.Backend = string(backend)
	if err := r.store.save(ctx, &r.p); err != nil {
		return nil, err
	}

	var runErr error
	if backend == BackendInTree {
		runErr = r.runInTree(ctx)
	} else {
		runErr = r.runClient(ctx)
	}
	res := r.result(backend, fellBack)

	if runErr == nil && backend == BackendClient && !r.opts.NoTrim {
		stored, err := TrimStoredVersions(ctx, r.m.c, r.opts.CRD, TrimExpectation{
			StorageVersion: r.t.storage, Generation: r.p.CRDGeneration, StoredVersionsAtStart: r.p.StoredVersionsAtStart})
		if err != nil {
			runErr = err
		} else {
			res.StoredVersions = stored
			r.log.Info("trimmed storedVersions", "storedVersions", stored)
		}
	}
	if runErr == nil && res.StoredVersions == nil {
		res.StoredVersions = r.readStoredVersions(ctx)
	}

	// Record the end, also when ctx was cancelled: a final checkpoint is worth a short
	// grace period, and a killed run stays Running so the next one resumes.
	saveCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	switch {
	case runErr == nil:
		r.p.Phase, r.p.CompletionTime, r.p.Message = PhaseSucceeded, time.Now(), ""
		r.p.Continue, r.p.LastKey = "", ""
	case ctx.Err() != nil:
		r.p.Message = "interrupted: " + context.Cause(ctx).Error()
	default:
		r.p.Phase, r.p.CompletionTime, r.p.Message = PhaseFailed, time.Now(), runErr.Error()
	}
	if err := r.store.save(saveCtx, &r.p); err != nil {
		r.log.Error(err, "could not record the end of the migration")
		if runErr == nil {
			runErr = err
		}
	}
	r.report(res, true)
	if runErr != nil {
		return res, runErr
	}
	return res, nil
}

func (r *run) readStoredVersions(ctx context.Context) []string {
	c := &apiextensionsv1.CustomResourceDefinition{}
	if err := r.m.c.Get(ctx, client.ObjectKey{Name: r.opts.CRD}, c); err != nil {
		return nil
	}
	return c.Status.StoredVersions
}

// result builds the Result from the run's progress.
func (r *run) result(backend Backend, fellBack string) *Result {
	d := time.Since(r.start)
	res := &Result{CRD: r.opts.CRD, StorageVersion: r.t.storage, Backend: backend, Counts: r.p.Counts,
		Total: max(r.p.Total, r.p.Counts.Done()), Duration: d, Resumed: r.resumed, FellBack: fellBack}
	if s := d.Seconds(); s > 0 {
		res.Rate = float64(r.doneThisRun()) / s
	}
	return res
}

// doneThisRun counts objects done by this run only (not by the attempts it resumed).
func (r *run) doneThisRun() int64 { return r.p.Counts.Done() - r.baseCounts.Done() }

func (r *run) report(res *Result, finished bool) {
	if r.opts.OnProgress == nil {
		return
	}
	r.opts.OnProgress(Status{CRD: res.CRD, StorageVersion: res.StorageVersion, Backend: res.Backend, Counts: res.Counts,
		Total: res.Total, Elapsed: res.Duration, DoneThisRun: r.doneThisRun(), Resumed: res.Resumed, Finished: finished})
}

// errStopped is the cause of a run stopped because of too many errors.
var errStopped = errors.New("too many objects failed")
