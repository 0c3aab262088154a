// Package cli holds widgetctl's commands (one file per command) on a cobra root that owns
// the global flags, the output format and the exit codes. cmd/widgetctl only calls Execute.
//
// Exit codes, the same for every command:
//
//	0  done
//	1  refused: a precondition does not hold (bad flags included); nothing needs undoing,
//	   the message says what to do next
//	2  error: something failed on the way; the message says what and whether to rerun
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"golang.org/x/term"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/widgetry/widget-operator/internal/apitraffic"
	"github.com/widgetry/widget-operator/internal/gatestate"
	"github.com/widgetry/widget-operator/internal/migrate"
)

// Exit codes of Execute.
const (
	ExitDone    = 0
	ExitRefused = 1
	ExitError   = 2
)

// Output formats of --output.
const (
	OutputText = "text"
	OutputJSON = "json"
)

// GlobalOptions are the flags and streams every command shares.
type GlobalOptions struct {
	// Kube holds kubectl's own connection flags (--kubeconfig, --context, -n, --as,
	// --as-group, --token, --server, --request-timeout...), so that `kubectl widget` takes
	// what `kubectl` takes.
	Kube   *genericclioptions.ConfigFlags
	Output string
	// Reason is recorded on every ConfigMap and Secret widgetctl writes (--reason; by default
	// the command line): the chart's gate-state guard lets a cluster admin write the objects
	// the upgrade gates trust only with a reason (internal/gatestate).
	Reason string
	// args are the command-line arguments, the default reason.
	args []string

	Stdout, Stderr io.Writer
	// StderrIsTerminal decides between a progress bar and structured log lines.
	StderrIsTerminal bool

	// command is the command running ("widgetctl verify"), the client named in the records of
	// our own requests.
	command string
	// own counts this run's requests for Widgets by version (ownrequests.go); records is the
	// records namespace once a command resolved it, where they are written.
	own     *apitraffic.OwnCounter
	records string
}

// Subcommands are the constructors of widgetctl's commands, in help order. A new command is a
// file in this package with a constructor appended here.
var Subcommands = []func(*GlobalOptions) *cobra.Command{
	NewStatusCommand,
	NewUpgradeCommand,
	NewMigrateCommand,
	NewVerifyCommand,
	NewBackupCommand,
	NewRestoreCommand,
	NewCensusCommand,
	NewMigrateReleaseCommand,
	NewCleanupFinalizersCommand,
	NewSelftestCommand,
	NewWaitWebhooksCommand,
	NewHandoverCommand,
}

// NewRootCommand builds widgetctl's root command with every command of Subcommands.
func NewRootCommand(g *GlobalOptions) *cobra.Command {
	root := &cobra.Command{
		Use:   "widgetctl",
		Short: "Staged API upgrades and storage migration for the widget-operator (also kubectl widget)",
		Long: `widgetctl drives the staged API upgrade of the Widget CRD and migrates the stored objects
of any CRD. It talks to the cluster of the current kubeconfig context.

Exit codes: 0 done, 1 refused (a precondition does not hold; nothing needs undoing), 2 error.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			g.command = cmd.CommandPath()
			if g.Output != OutputText && g.Output != OutputJSON {
				return refused(fmt.Errorf("--output %q: use text or json", g.Output))
			}
			return nil
		},
	}
	root.SetOut(g.Stdout)
	root.SetErr(g.Stderr)
	pf := root.PersistentFlags()
	if g.Kube == nil {
		g.Kube = genericclioptions.NewConfigFlags(true)
	}
	g.Kube.AddFlags(pf)
	pf.StringVarP(&g.Output, "output", "o", OutputText, "output format: text or json")
	pf.StringVar(&g.Reason, "reason", "", "why you write the objects the upgrade gates trust (migration progress, traffic samples, backup record, pause marker), recorded on them and in the audit log (default: this command line)")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return refused(err) })
	for _, newCommand := range Subcommands {
		root.AddCommand(newCommand(g))
	}
	return root
}

// RESTConfig is the client configuration kubectl would use with the same flags (the
// kubeconfig's context, or the in-cluster configuration in a pod), with API warnings
// (deprecated versions...) written once each to stderr.
func (g *GlobalOptions) RESTConfig() (*rest.Config, error) {
	cfg, err := g.kube().ToRESTConfig()
	if err != nil {
		return nil, refused(fmt.Errorf("load the kubeconfig: %w (pass --kubeconfig or --context, or --server with --token)", err))
	}
	cfg = rest.CopyConfig(cfg)
	cfg.WarningHandler = rest.NewWarningWriter(g.Stderr, rest.WarningWriterOptions{Deduplicate: true})
	cfg.UserAgent = "widgetctl"
	cfg.Wrap(g.ownRequests().Wrap)
	return cfg, nil
}

// NewClient is the client every command writes with: its ConfigMap and Secret writes carry
// WriteReason (internal/gatestate).
func (g *GlobalOptions) NewClient(rc *rest.Config, scheme *runtime.Scheme) (client.Client, error) {
	c, err := client.New(rc, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("create a client: %w", err)
	}
	return gatestate.RecordingReason(c, g.WriteReason()), nil
}

// Clientset is the typed client of rc, for what controller-runtime's client does not do: Helm's
// release storage reads through it.
func (g *GlobalOptions) Clientset(rc *rest.Config) (kubernetes.Interface, error) {
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("create a client: %w", err)
	}
	return cs, nil
}

// NewMigrator is the migrator every command migrates with: its progress object carries
// WriteReason.
func (g *GlobalOptions) NewMigrator(rc *rest.Config) (*migrate.Migrator, error) {
	m, err := migrate.New(rc)
	if err != nil {
		return nil, err
	}
	m.RecordReason(g.WriteReason())
	return m, nil
}

// WriteReason is --reason, or the command line that writes.
func (g *GlobalOptions) WriteReason() string {
	if g.Reason != "" {
		return g.Reason
	}
	r := "widgetctl " + strings.Join(g.args, " ")
	if len(r) > 512 {
		r = r[:512]
	}
	return r
}

// kube returns the connection flags; tests that build GlobalOptions by hand get kubectl's
// defaults.
func (g *GlobalOptions) kube() *genericclioptions.ConfigFlags {
	if g.Kube == nil {
		g.Kube = genericclioptions.NewConfigFlags(true)
	}
	return g.Kube
}

// Namespace is -n when given, else the context's namespace ("default" if it names none; the
// pod's own namespace in a cluster). Commands that act on the operator's own records use
// findReleaseNamespace instead.
func (g *GlobalOptions) Namespace() string {
	ns, _, err := g.kube().ToRawKubeConfigLoader().Namespace()
	if err != nil || ns == "" {
		return "default"
	}
	return ns
}

// explicitNamespace is -n/--namespace as given, or "".
func (g *GlobalOptions) explicitNamespace() string {
	if g.kube().Namespace == nil {
		return ""
	}
	return *g.kube().Namespace
}

// refusedError marks an error as a refusal (exit code 1).
type refusedError struct{ err error }

func (e *refusedError) Error() string { return e.err.Error() }
func (e *refusedError) Unwrap() error { return e.err }

func refused(err error) error { return &refusedError{err: err} }

// exitCode maps a command's error to the process exit code.
func exitCode(err error) int {
	var r *refusedError
	switch {
	case err == nil:
		return ExitDone
	case errors.As(err, &r), migrate.IsRefused(err):
		return ExitRefused
	default:
		return ExitError
	}
}

// Execute runs widgetctl with args (without the program name) and returns its exit code.
// SIGINT and SIGTERM cancel ctx, so commands can record where they stopped.
func Execute(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	g := &GlobalOptions{Stdout: stdout, Stderr: stderr, args: args}
	// The commands use controller-runtime's client, which logs through its global logger;
	// left unset, it prints a warning with a stack trace after 30 seconds. Its messages are
	// debug-level; the commands report what matters themselves.
	ctrllog.SetLogger(logr.Discard())
	if f, ok := stderr.(*os.File); ok {
		g.StderrIsTerminal = term.IsTerminal(int(f.Fd()))
	}
	root := NewRootCommand(g)
	if asKubectlPlugin(os.Args[0]) {
		// kubectl runs plugins by their file name; help and usage then say what was typed.
		root.Annotations = map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl widget"}
	}
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	g.recordOwnRequests(ctx)
	code := exitCode(err)
	if err != nil {
		label := "error"
		if code == ExitRefused {
			label = "refused"
		}
		// Commands that report in JSON print their own result object; the line on stderr
		// is for humans either way.
		fmt.Fprintf(stderr, "%s: %v\n", label, err)
	}
	return code
}

// asKubectlPlugin reports whether the binary runs under its plugin name, kubectl-widget.
func asKubectlPlugin(argv0 string) bool {
	return strings.TrimSuffix(filepath.Base(argv0), ".exe") == "kubectl-widget"
}
