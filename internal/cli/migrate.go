package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"

	"github.com/widgetry/widget-operator/internal/migrate"
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

It works for any CRD. For a reverse migration make the older version the storage version
first, then run migrate --to it: --to only checks that VERSION is the storage version.

Backends: client rewrites from this process (empty merge patches carrying each object's
resourceVersion; conflicts and deletions are counted, not retried); in-tree creates a
storagemigration.k8s.io/v1 StorageVersionMigration for kube-controller-manager, which trims
storedVersions itself (fails if no controller picks the migration up within
--in-tree-probe-timeout); auto uses in-tree only when its controller does, else client.

Progress is kept in the ConfigMap widget-migration-<crd> in --progress-namespace: a killed
migration resumes where it stopped when run again. The operator's manager exports it as
the widget_migration_* metrics.`,
		Example: `  widgetctl migrate --crd widgets.widgetry.io
  widgetctl migrate --crd widgets.widgetry.io --to v1alpha1 --backend client -o json`,
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
	fl.BoolVar(&f.statusSubresource, "status-subresource", false, "write through the status subresource, so admission webhooks on the main resource cannot change or block the rewrite")
	fl.StringVar(&f.progressNamespace, "progress-namespace", "", "namespace of the progress ConfigMap (default: the context's namespace; the release namespace in a cluster)")
	fl.Int64Var(&f.pageSize, "page-size", migrate.DefaultPageSize, "objects per LIST page")
	fl.Int64Var(&f.maxErrors, "max-errors", migrate.DefaultMaxErrors, "stop after this many objects failed")
	fl.DurationVar(&f.inTreeProbeTimeout, "in-tree-probe-timeout", migrate.DefaultInTreeProbeTimeout, "how long to wait for kube-controller-manager to pick up an in-tree migration (then auto falls back to client, in-tree fails)")
	fl.DurationVar(&f.inTreeTimeout, "in-tree-timeout", 0, "in-tree: give up waiting after this long (0: no limit); the migration keeps running in the cluster")
	return cmd
}

func runMigrate(cmd *cobra.Command, g *GlobalOptions, f *migrateFlags) error {
	if f.crd == "" {
		return refused(errors.New("--crd NAME is required ('kubectl get crd' lists them)"))
	}
	if f.concurrency < 1 || f.qps <= 0 || f.burst < 1 || f.pageSize < 1 || f.maxErrors < 1 {
		return refused(errors.New("--concurrency, --qps, --burst, --page-size and --max-errors must be positive"))
	}
	cfg, err := g.RESTConfig()
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = f.qps, f.burst
	m, err := migrate.New(cfg)
	if err != nil {
		return err
	}
	ns := f.progressNamespace
	if ns == "" {
		ns = g.Namespace()
	}

	events := newEventLogger(g)
	progress := newProgressPrinter(g, events)
	res, err := m.Migrate(cmd.Context(), migrate.Options{
		CRD: f.crd, To: f.to, Backend: migrate.Backend(f.backend), Concurrency: f.concurrency,
		PageSize: f.pageSize, StatusSubresource: f.statusSubresource, ProgressNamespace: ns, MaxErrors: f.maxErrors,
		InTreeProbeTimeout: f.inTreeProbeTimeout, InTreeTimeout: f.inTreeTimeout,
		Logger: logr.FromSlogHandler(events.Handler()), OnProgress: progress.update,
	})
	progress.finish()
	if err != nil && cmd.Context().Err() != nil {
		err = fmt.Errorf("interrupted; progress is saved in ConfigMap %s/%s: run the same command again to resume: %w",
			ns, migrate.ProgressObjectName(f.crd), err)
	}
	printMigrateSummary(g, res, err)
	return err
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
}

func printMigrateSummary(g *GlobalOptions, res *migrate.Result, err error) {
	s := migrateSummary{Result: "done"}
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
