package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/widgetry/widget-operator/internal/migrate"
	"github.com/widgetry/widget-operator/internal/scheme"
	"github.com/widgetry/widget-operator/internal/storageversion"
)

// migrateFlags are widgetctl migrate's flags.
type migrateFlags struct {
	crd, to, backend, progressNamespace string
	concurrency                         int
	qps                                 float32
	burst                               int
	statusSubresource                   bool
	pageSize, maxErrors                 int64
	inTreeProbeTimeout, inTreeTimeout   time.Duration
	storageWait                         storageWaitFlags
	dropManagedFieldsOf                 string
	sealCheckpoints                     bool
}

// apiserverFlags name the kube-apiserver instances asked directly: by the storage-version
// wait before a migration, and by the traffic check of unserve and remove.
type apiserverFlags struct {
	instances  []string
	serverName string
}

func (f *apiserverFlags) bind(fl *pflag.FlagSet) {
	fl.StringSliceVar(&f.instances, "apiserver-instances", nil, "host:port of every kube-apiserver instance, each reachable directly (not through a load balancer), instead of the endpoints of Service default/kubernetes")
	fl.StringVar(&f.serverName, "apiserver-server-name", "", "name the instances' serving certificates are verified for (default: the kubeconfig's tls-server-name, else its server's host; e.g. kubernetes.default.svc)")
}

func (f *apiserverFlags) validate() error {
	for _, a := range f.instances {
		if !isHostPort(a) {
			return refused(fmt.Errorf("--apiserver-instances %q: want host:port, e.g. 10.0.0.11:6443", a))
		}
	}
	return nil
}

// storageWaitFlags tune the wait for every kube-apiserver to write the storage version, which
// migrate and upgrade apply (at migrate) run before rewriting anything.
type storageWaitFlags struct {
	apiserverFlags
	timeout time.Duration
	skip    bool
}

// bind binds the wait's own flags; the apiserver flags are bound by the command (bindAll).
func (f *storageWaitFlags) bind(fl *pflag.FlagSet) {
	fl.DurationVar(&f.timeout, "storage-version-wait-timeout", storageversion.DefaultTimeout, "how long to wait for every kube-apiserver to write the CRD in its storage version before migrating")
	fl.BoolVar(&f.skip, "skip-storage-version-wait", false, "migrate without checking that every kube-apiserver writes the storage version (only when you know they all do)")
}

// bindAll binds the wait's flags and the apiserver flags.
func (f *storageWaitFlags) bindAll(fl *pflag.FlagSet) {
	f.bind(fl)
	f.apiserverFlags.bind(fl)
}

// NewMigrateCommand builds `widgetctl migrate`.
func NewMigrateCommand(g *GlobalOptions) *cobra.Command {
	f := &migrateFlags{}
	cmd := &cobra.Command{
		Use:   "migrate --crd NAME [--to VERSION] [--backend auto|client|in-tree]",
		Short: "Re-encode every stored object of a CRD in its storage version, then trim status.storedVersions",
		Long: `migrate rewrites every stored object of the CRD so that etcd holds it in the CRD's storage
version, then sets status.storedVersions to [storage] - after re-reading the CRD and refusing
if its storage version or spec changed, or a stored version appeared, during the run.

Before rewriting anything it waits until every kube-apiserver instance writes the CRD in its
storage version: each switches when its own informer sees the CRD change, and one still
writing the old version would undo the migration behind it. The instances are the addresses
in the endpoints of Service default/kubernetes, each asked directly (same credentials, its
certificate verified against the kubeconfig's CA) for the CRD's storageVersionHash. Where
those addresses are not reachable, name every instance with --apiserver-instances.

It works for any CRD. For a reverse migration make the older version the storage version
first, then run migrate --to it: --to only checks that VERSION is the storage version.

Backends: client rewrites from this process (empty merge patches carrying each object's
resourceVersion; conflicts and deletions are counted, not retried); in-tree creates a
storagemigration.k8s.io/v1 StorageVersionMigration for kube-controller-manager, which trims
storedVersions itself (fails if no controller picks the migration up within
--in-tree-probe-timeout); auto uses in-tree only when its controller does, else client.

Progress is kept in the ConfigMap widget-migration-<crd> in --progress-namespace: a killed
migration resumes where it stopped when run again. The operator's manager exports it as
the widget_migration_* metrics.

--drop-managed-fields-of VERSION then removes, from every object, the managedFields entries
recorded through VERSION, which must no longer be served (the chart's hook runs it at
unserve): server-side apply converts every entry through its version, and fails on objects
that keep one once VERSION is removed from the CRD.`,
		Example: `  widgetctl migrate --crd widgets.widgetry.io
  widgetctl migrate --crd widgets.widgetry.io --to v1alpha1 --backend client -o json
  widgetctl migrate --crd widgets.widgetry.io --drop-managed-fields-of v1alpha1`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runMigrate(cmd, g, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.crd, "crd", "", "name of the CustomResourceDefinition, e.g. widgets.widgetry.io (required)")
	fl.StringVar(&f.to, "to", "", "expected storage version; refuse if the CRD stores another (for reverse migrations)")
	fl.StringVar(&f.backend, "backend", string(migrate.BackendAuto), "who rewrites the objects: auto, client or in-tree")
	fl.IntVar(&f.concurrency, "concurrency", migrate.DefaultConcurrency, "objects written at once (client backend)")
	fl.Float32Var(&f.qps, "qps", migrate.DefaultQPS, "client-side limit of requests per second; the apiserver's 429 answers are honoured on top")
	fl.IntVar(&f.burst, "burst", migrate.DefaultBurst, "client-side burst of requests")
	fl.BoolVar(&f.statusSubresource, "status-subresource", false, "require the status subresource: refuse a CRD without one (by default the rewrite goes through /status whenever the version has it, so admission webhooks on the main resource cannot change or block it)")
	fl.StringVar(&f.progressNamespace, "progress-namespace", "", "namespace of the progress ConfigMap, which the manager reads (default: -n, else the namespace of the release that installed the Widget CRD, else the context's)")
	fl.Int64Var(&f.pageSize, "page-size", migrate.DefaultPageSize, "objects per LIST page")
	fl.Int64Var(&f.maxErrors, "max-errors", migrate.DefaultMaxErrors, "stop after this many objects failed")
	fl.DurationVar(&f.inTreeProbeTimeout, "in-tree-probe-timeout", migrate.DefaultInTreeProbeTimeout, "how long to wait for kube-controller-manager to pick up an in-tree migration (then auto falls back to client, in-tree fails)")
	fl.DurationVar(&f.inTreeTimeout, "in-tree-timeout", 0, "in-tree: give up waiting after this long (0: no limit); the migration keeps running in the cluster")
	fl.BoolVar(&f.sealCheckpoints, "seal-checkpoints", false, "mark the checkpoints as the chart's migrate hook's, so that a later run resumes from them (the chart's hook passes it; the apiserver refuses the seal from anyone else, and a checkpoint without it is followed by a full pass)")
	fl.StringVar(&f.dropManagedFieldsOf, "drop-managed-fields-of", "", "after the migration, drop every object's managedFields entries recorded through this version, which must no longer be served (before removing it from the CRD)")
	f.storageWait.bindAll(fl)
	return cmd
}

func runMigrate(cmd *cobra.Command, g *GlobalOptions, f *migrateFlags) error {
	if f.crd == "" {
		return refused(errors.New("--crd NAME is required ('kubectl get crd' lists them)"))
	}
	if f.concurrency < 1 || f.qps <= 0 || f.burst < 1 || f.pageSize < 1 || f.maxErrors < 1 {
		return refused(errors.New("--concurrency, --qps, --burst, --page-size and --max-errors must be positive"))
	}
	if err := f.storageWait.validate(); err != nil {
		return err
	}
	cfg, err := g.RESTConfig()
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = f.qps, f.burst
	m, err := g.NewMigrator(cfg)
	if err != nil {
		return err
	}
	ns, err := g.recordsNamespace(cmd.Context(), f.progressNamespace)
	if err != nil {
		return err
	}

	events := newEventLogger(g)
	waited, err := waitForStorageVersion(cmd.Context(), g, cfg, f.crd, f.to, &f.storageWait, events)
	if err != nil {
		printMigrateSummary(g, nil, waited, nil, err)
		return err
	}
	to := f.to
	if waited != nil && waited.Result != nil {
		// Migrate refuses if the storage version changed since the wait.
		to = waited.StorageVersion
	}
	progress := newProgressPrinter(g, events)
	res, err := m.Migrate(cmd.Context(), migrate.Options{
		CRD: f.crd, To: to, Backend: migrate.Backend(f.backend), Concurrency: f.concurrency, Seal: sealValue(f.sealCheckpoints),
		PageSize: f.pageSize, StatusSubresource: f.statusSubresource, ProgressNamespace: ns, MaxErrors: f.maxErrors,
		InTreeProbeTimeout: f.inTreeProbeTimeout, InTreeTimeout: f.inTreeTimeout,
		Logger: logr.FromSlogHandler(events.Handler()), OnProgress: progress.update,
	})
	progress.finish()
	if err != nil && cmd.Context().Err() != nil {
		err = fmt.Errorf("interrupted; progress is saved in ConfigMap %s/%s: run the same command again to resume: %w",
			ns, migrate.ProgressObjectName(f.crd), err)
	}
	var dropped *droppedManagedFields
	if err == nil && f.dropManagedFieldsOf != "" {
		counts, derr := m.DropManagedFields(cmd.Context(), f.crd, f.dropManagedFieldsOf)
		dropped = &droppedManagedFields{Version: f.dropManagedFieldsOf, Objects: counts.Migrated, Conflicts: counts.Conflict, NotFound: counts.NotFound, Errors: counts.Error}
		err = derr
	}
	printMigrateSummary(g, res, waited, dropped, err)
	return err
}

// droppedManagedFields is what --drop-managed-fields-of did.
type droppedManagedFields struct {
	Version   string `json:"version"`
	Objects   int64  `json:"objects"`
	Conflicts int64  `json:"conflicts"`
	NotFound  int64  `json:"notFound"`
	Errors    int64  `json:"errors"`
}

// isHostPort: an instance is dialled as given, so a URL or a bare host would fail every request.
func isHostPort(a string) bool {
	host, port, err := net.SplitHostPort(a)
	n, perr := strconv.Atoi(port)
	return err == nil && host != "" && perr == nil && n > 0 && n < 65536
}

// storageVersionWait is what migrate waited for before rewriting (--output json).
type storageVersionWait struct {
	Skipped bool `json:"skipped,omitempty"`
	*storageversion.Result
	WaitedSeconds float64 `json:"waitedSeconds,omitempty"`
}

// waitForStorageVersion returns once every kube-apiserver writes the CRD in its storage
// version (internal/storageversion), unless --skip-storage-version-wait.
func waitForStorageVersion(ctx context.Context, g *GlobalOptions, cfg *rest.Config, crdName, version string, f *storageWaitFlags, events *slog.Logger) (*storageVersionWait, error) {
	if f.skip {
		fmt.Fprintf(g.Stderr, "not checking that every kube-apiserver writes CRD %s in its storage version (--skip-storage-version-wait)\n", crdName)
		return &storageVersionWait{Skipped: true}, nil
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		return nil, err
	}
	res, err := storageversion.Wait(ctx, c, cfg, crdName, storageversion.Options{
		Version: version, Instances: f.instances, ServerName: f.serverName,
		Timeout: f.timeout, Logger: logr.FromSlogHandler(events.Handler()),
	})
	var lag *storageversion.LagError
	switch {
	case errors.Is(err, storageversion.ErrPrecondition):
		return nil, nil // Migrate checks the same and refuses, naming the fix
	case errors.As(err, &lag):
		return nil, refused(fmt.Errorf("%w. Nothing was rewritten. Next: find out why the instance lags (its log; is it up?) and rerun; "+
			"if these addresses are not reachable from where widgetctl runs, name every instance with --apiserver-instances host:port,...; "+
			"--skip-storage-version-wait only once you know every instance writes %s", err, lag.Result.StorageVersion))
	case err != nil && ctx.Err() == nil:
		return nil, fmt.Errorf("%w (nothing was rewritten; --apiserver-instances names the instances, --skip-storage-version-wait skips the check)", err)
	case err != nil:
		return nil, err
	}
	w := &storageVersionWait{Result: res, WaitedSeconds: res.Duration.Seconds()}
	if g.Output != OutputJSON {
		from := "--apiserver-instances"
		if res.FromEndpoints {
			from = "the endpoints of Service default/kubernetes"
		}
		fmt.Fprintf(g.Stdout, "every kube-apiserver writes CRD %s as %s (storageVersionHash %s): %s (from %s), after %s\n",
			res.CRD, res.StorageVersion, res.Hash, strings.Join(res.Addresses(), ", "), from, res.Duration.Round(time.Millisecond))
	}
	return w, nil
}

// migrateSummary is the --output json result of widgetctl migrate.
type migrateSummary struct {
	Result           string   `json:"result"` // done, refused or error
	Message          string   `json:"message,omitempty"`
	CRD              string   `json:"crd,omitempty"`
	StorageVersion   string   `json:"storageVersion,omitempty"`
	Backend          string   `json:"backend,omitempty"`
	FellBack         string   `json:"fellBackBecause,omitempty"`
	Objects          int64    `json:"objects"`
	Migrated         int64    `json:"migrated"`
	Unchanged        int64    `json:"alreadyInStorageVersion"`
	Conflicts        int64    `json:"conflicts"`
	NotFound         int64    `json:"notFound"`
	Errors           int64    `json:"errors"`
	DurationSeconds  float64  `json:"durationSeconds"`
	ObjectsPerSecond float64  `json:"objectsPerSecond"`
	Resumed          bool     `json:"resumed"`
	NothingToDo      bool     `json:"nothingToDo"`
	StoredVersions   []string `json:"storedVersions,omitempty"`
	// StorageVersionWait is what was waited for before the first rewrite.
	StorageVersionWait *storageVersionWait `json:"storageVersionWait,omitempty"`
	// DroppedManagedFields is what --drop-managed-fields-of did.
	DroppedManagedFields *droppedManagedFields `json:"droppedManagedFields,omitempty"`
}

func printMigrateSummary(g *GlobalOptions, res *migrate.Result, waited *storageVersionWait, dropped *droppedManagedFields, err error) {
	s := migrateSummary{Result: "done", StorageVersionWait: waited, DroppedManagedFields: dropped}
	switch exitCode(err) {
	case ExitRefused:
		s.Result, s.Message = "refused", err.Error()
	case ExitError:
		s.Result, s.Message = "error", err.Error()
	}
	if res != nil {
		s.CRD, s.StorageVersion, s.Backend, s.FellBack = res.CRD, res.StorageVersion, string(res.Backend), res.FellBack
		s.Objects, s.Migrated, s.Unchanged = res.Counts.Done(), res.Counts.Migrated, res.Counts.Unchanged
		s.Conflicts, s.NotFound, s.Errors = res.Counts.Conflict, res.Counts.NotFound, res.Counts.Error
		s.DurationSeconds, s.ObjectsPerSecond = res.Duration.Seconds(), res.Rate
		s.Resumed, s.NothingToDo, s.StoredVersions = res.Resumed, res.NothingToDo, res.StoredVersions
	}
	if g.Output == OutputJSON {
		enc := json.NewEncoder(g.Stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(s)
		return
	}
	if dropped != nil {
		defer fmt.Fprintf(g.Stdout, "dropped the managedFields entries of %s from %d objects (%d conflicts, %d not found, %d errors: rerun to catch them)\n",
			dropped.Version, dropped.Objects, dropped.Conflicts, dropped.NotFound, dropped.Errors)
	}
	if res == nil {
		return // the error line on stderr says it all
	}
	if res.NothingToDo {
		fmt.Fprintf(g.Stdout, "nothing to migrate: CRD %s already stores only %s (storedVersions %v)\n", res.CRD, res.StorageVersion, res.StoredVersions)
		return
	}
	var b strings.Builder
	verb := "migrated"
	if err != nil {
		verb = "stopped migrating"
	}
	fmt.Fprintf(&b, "%s CRD %s to %s with the %s backend", verb, res.CRD, res.StorageVersion, res.Backend)
	if res.Resumed {
		b.WriteString(" (resumed)")
	}
	fmt.Fprintf(&b, ": %d objects (%d rewritten, %d already in %s), %d conflicts, %d not found, %d errors in %s (%.0f objects/s)",
		res.Counts.Done(), res.Counts.Migrated-res.Counts.Unchanged, res.Counts.Unchanged, res.StorageVersion,
		res.Counts.Conflict, res.Counts.NotFound, res.Counts.Error, res.Duration.Round(time.Millisecond), res.Rate)
	if res.StoredVersions != nil {
		fmt.Fprintf(&b, "; storedVersions %v", res.StoredVersions)
	}
	if res.FellBack != "" {
		fmt.Fprintf(&b, "\n  (not in-tree: %s)", res.FellBack)
	}
	fmt.Fprintln(g.Stdout, b.String())
}

// newEventLogger logs the migrator's events to stderr: text lines, or JSON with --output json.
func newEventLogger(g *GlobalOptions) *slog.Logger {
	if g.Output == OutputJSON {
		return slog.New(slog.NewJSONHandler(g.Stderr, nil))
	}
	return slog.New(slog.NewTextHandler(g.Stderr, nil))
}

// sealValue is the seal of the chart's migrate hook's checkpoints (migrate.KeySealedBy).
func sealValue(seal bool) string {
	if seal {
		return "widgetctl migrate --seal-checkpoints"
	}
	return ""
}
