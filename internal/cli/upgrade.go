package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/metadata"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/migrate"
	"github.com/widgetry/widget-operator/internal/upgrade"
)

// upgradeFlags select the CRD and the version pair; the defaults are the Widget API's.
type upgradeFlags struct {
	crd, old, new string
	to            string
	allowJump     bool
	webhookURL    string
}

func (f *upgradeFlags) bind(cmd *cobra.Command, withTarget bool) {
	fl := cmd.Flags()
	fl.StringVar(&f.crd, "crd", crd.WidgetName, "name of the CustomResourceDefinition")
	fl.StringVar(&f.old, "old-version", "v1alpha1", "the version being retired")
	fl.StringVar(&f.new, "new-version", "v1", "the version replacing it")
	fl.StringVar(&f.webhookURL, "webhook-url", "", "reach the conversion webhook here instead of its Service (e.g. through kubectl port-forward); its certificate is still verified against the CRD's caBundle")
	if withTarget {
		fl.StringVar(&f.to, "to", "", "target stage: initial, add-version, flip-storage, migrate or unserve (required)")
		fl.BoolVar(&f.allowJump, "allow-jump", false, "allow moving more than one stage, still step by step with every check")
	}
}

// config is the engine's Config for the flags: the Widget API's own (with its schemas, probe
// objects and owner-reference checks) or a generic one for any other CRD.
func (f *upgradeFlags) config() upgrade.Config {
	if f.crd == crd.WidgetName && f.old == "v1alpha1" && f.new == "v1" {
		return upgrade.WidgetConfig()
	}
	return upgrade.Config{CRD: f.crd, Old: f.old, New: f.new, RunbookDir: "runbooks/upgrade",
		ProbeObject: func() map[string]any { return map[string]any{} }}
}

// engine bundles what the upgrade commands need.
type engine struct {
	cfg     upgrade.Config
	clients upgrade.Clients
}

func upgradeScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(apiextensionsv1.AddToScheme(s))
	return s
}

func newEngine(g *GlobalOptions, f *upgradeFlags) (*engine, error) {
	rc, err := g.RESTConfig()
	if err != nil {
		return nil, err
	}
	c, err := client.New(rc, client.Options{Scheme: upgradeScheme()})
	if err != nil {
		return nil, fmt.Errorf("create a client: %w", err)
	}
	md, err := metadata.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	return &engine{cfg: f.config(), clients: upgrade.Clients{Client: c, Metadata: md, DryRunNamespace: g.Namespace(),
		Probe: upgrade.ProbeOptions{URL: f.webhookURL}}}, nil
}

func (e *engine) observe(ctx context.Context) (*upgrade.Observation, error) {
	return upgrade.Observe(ctx, e.clients.Client, e.cfg)
}

// asExit turns engine refusals into widgetctl refusals (exit code 1).
func asExit(err error) error {
	if upgrade.IsRefusal(err) {
		return refused(err)
	}
	return err
}

func parseTarget(f *upgradeFlags) (crd.Stage, error) {
	if f.to == "" {
		return "", refused(errors.New("--to STAGE is required: initial, add-version, flip-storage, migrate or unserve"))
	}
	return crd.Stage(f.to), nil
}

// NewUpgradeCommand builds `widgetctl upgrade` and its subcommands.
func NewUpgradeCommand(g *GlobalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "upgrade",
		Short: "Observe, plan, check and apply the staged API upgrade of a CRD",
		Long: `The staged upgrade moves a CRD from an old version to a new one in five stages:
initial -> add-version -> flip-storage -> migrate -> unserve, one stage at a time, each
with preflight checks; rollback is one stage back. The stage is read from the live CRD
(served/storage flags and status.storedVersions), never from Helm's history.`,
	}
	cmd.AddCommand(newUpgradeStatusCommand(g), newUpgradePlanCommand(g), newUpgradePreflightCommand(g), newUpgradeApplyCommand(g))
	return cmd
}

// statusReport is `upgrade status`'s result.
type statusReport struct {
	*upgrade.Observation
	StageLabel    string `json:"stageLabel"`
	WebhookHealth string `json:"webhookHealth"`
	Objects       *int   `json:"objects,omitempty"`
	Next          string `json:"next,omitempty"`
}

func newUpgradeStatusCommand(g *GlobalOptions) *cobra.Command {
	f := &upgradeFlags{}
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the CRD's versions, flags, storedVersions, stage, conversion webhook health and object count",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			e, err := newEngine(g, f)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			o, err := e.observe(ctx)
			if err != nil {
				return err
			}
			r := statusReport{Observation: o, StageLabel: o.StageLabel(), WebhookHealth: "not checked (one version)"}
			if o.Exists && o.Old.Present && o.New.Present {
				r.WebhookHealth = "ok: " + o.Old.Name + " -> " + o.New.Name + " -> " + o.Old.Name + " round trip over TLS verified with the CRD's caBundle"
				live := &apiextensionsv1.CustomResourceDefinition{}
				if err := e.clients.Client.Get(ctx, client.ObjectKey{Name: o.CRD}, live); err == nil {
					if err := upgrade.ProbeConversion(ctx, live, e.cfg, e.clients.Probe); err != nil {
						r.WebhookHealth = "FAILING: " + err.Error()
					}
				}
			}
			if o.Exists {
				if n, err := countObjects(ctx, e.clients.Metadata, e.clients.Client, o.CRD); err == nil {
					r.Objects = &n
				}
			}
			r.Next = nextStep(o)
			if g.Output == OutputJSON {
				return writeJSON(g.Stdout, r)
			}
			printStatus(g.Stdout, r)
			return nil
		},
	}
	f.bind(cmd, false)
	return cmd
}

// nextStep suggests the next forward stage.
func nextStep(o *upgrade.Observation) string {
	switch {
	case !o.Exists:
		return "install the chart (any stage may be installed while nothing is stored)"
	case o.Inconsistent != "":
		return "repair the CRD by hand (runbooks/upgrade/README.md)"
	}
	i := slices.Index(crd.Stages, o.Stage)
	if o.Stage == crd.StageFlipStorage {
		return "migrate: run the migration and trim storedVersions (widgetctl upgrade plan --to migrate)"
	}
	if i+1 < len(crd.Stages) {
		return fmt.Sprintf("%s (widgetctl upgrade plan --to %s)", crd.Stages[i+1], crd.Stages[i+1])
	}
	return "none: the upgrade is complete"
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func printStatus(w io.Writer, r statusReport) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "CRD\t%s\n", r.CRD)
	fmt.Fprintf(tw, "Stage\t%s\n", r.StageLabel)
	if r.Inconsistent != "" {
		fmt.Fprintf(tw, "Inconsistent\t%s\n", r.Inconsistent)
	}
	if r.Exists {
		fmt.Fprintln(tw, "\nVERSION\tPRESENT\tSERVED\tSTORAGE\tDEPRECATED")
		for _, v := range []upgrade.VersionState{r.Old, r.New} {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", v.Name, yesNo(v.Present), yesNo(v.Served), yesNo(v.Storage), yesNo(v.Deprecated))
		}
		fmt.Fprintln(tw)
		fmt.Fprintf(tw, "storedVersions\t[%s]\n", strings.Join(r.StoredVersions, ", "))
		conv := r.Conversion
		if r.Webhook != "" {
			conv += " (" + r.Webhook + ")"
		}
		fmt.Fprintf(tw, "Conversion\t%s\n", conv)
		fmt.Fprintf(tw, "Webhook health\t%s\n", r.WebhookHealth)
		if r.Objects != nil {
			fmt.Fprintf(tw, "Objects\t%d\n", *r.Objects)
		}
	}
	fmt.Fprintf(tw, "Next\t%s\n", r.Next)
	_ = tw.Flush()
}

// countObjects counts the CRD's objects through its storage version, page by page, reading
// metadata only.
func countObjects(ctx context.Context, md metadata.Interface, c client.Client, crdName string) (int, error) {
	live := &apiextensionsv1.CustomResourceDefinition{}
	if err := c.Get(ctx, client.ObjectKey{Name: crdName}, live); err != nil {
		return 0, err
	}
	version := ""
	for _, v := range live.Spec.Versions {
		if v.Storage {
			version = v.Name
		}
	}
	gvr := schema.GroupVersionResource{Group: live.Spec.Group, Version: version, Resource: live.Spec.Names.Plural}
	n, cont := 0, ""
	for {
		list, err := md.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 500, Continue: cont})
		if err != nil {
			return 0, err
		}
		n += len(list.Items)
		if cont = list.Continue; cont == "" {
			return n, nil
		}
	}
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// planReport is the result of plan, preflight and apply.
type planReport struct {
	CRD     string                `json:"crd"`
	From    string                `json:"from"`
	To      crd.Stage             `json:"to"`
	Steps   []upgrade.Step        `json:"steps"`
	Checks  []upgrade.CheckResult `json:"checks,omitempty"`
	Refused string                `json:"refused,omitempty"`
	Applied bool                  `json:"applied,omitempty"`
}

// planFor observes and plans; a refusal is reported (JSON) and returned.
func planFor(cmd *cobra.Command, g *GlobalOptions, f *upgradeFlags) (*engine, *upgrade.Observation, *planReport, error) {
	target, err := parseTarget(f)
	if err != nil {
		return nil, nil, nil, err
	}
	e, err := newEngine(g, f)
	if err != nil {
		return nil, nil, nil, err
	}
	o, err := e.observe(cmd.Context())
	if err != nil {
		return nil, nil, nil, err
	}
	r := &planReport{CRD: o.CRD, From: o.StageLabel(), To: target}
	r.Steps, err = upgrade.Plan(o, e.cfg, target, f.allowJump)
	if err != nil {
		r.Refused = err.Error()
	}
	return e, o, r, err
}

func printPlan(w io.Writer, r *planReport) {
	fmt.Fprintf(w, "CRD %s: %s -> %s\n", r.CRD, r.From, r.To)
	if len(r.Steps) == 0 && r.Refused == "" {
		fmt.Fprintln(w, "Nothing to do: the CRD is at the target stage.")
	}
	for i, s := range r.Steps {
		kind := "forward"
		if s.Rollback {
			kind = "rollback"
		}
		from := string(s.From)
		if from == "" {
			from = "none"
		}
		fmt.Fprintf(w, "%d. %s -> %s (%s)\n   change: %s\n", i+1, from, s.To, kind, s.Change)
		if s.Then != "" {
			fmt.Fprintf(w, "   then:   %s\n", s.Then)
		}
		names := make([]string, len(s.Checks))
		for j, c := range s.Checks {
			names[j] = string(c)
		}
		fmt.Fprintf(w, "   checks: %s\n", strings.Join(names, ", "))
	}
	for _, c := range r.Checks {
		mark := "ok"
		if !c.OK {
			mark = "FAILED: " + c.Error
		}
		fmt.Fprintf(w, "check %-36s %s\n", c.Check, mark)
	}
}

func finish(g *GlobalOptions, r *planReport, err error) error {
	if g.Output == OutputJSON {
		if werr := writeJSON(g.Stdout, r); werr != nil {
			return werr
		}
	} else {
		printPlan(g.Stdout, r)
	}
	return asExit(err)
}

// newStageCommand builds one of the commands that plan to a target stage (plan, preflight,
// apply): flags, observation and plan, then act (nil for plan alone) on a plan that was not
// refused, then the report and the exit code.
func newStageCommand(g *GlobalOptions, use, short, long string,
	act func(cmd *cobra.Command, e *engine, o *upgrade.Observation, r *planReport) error) *cobra.Command {
	f := &upgradeFlags{}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Long:  long,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			e, o, r, err := planFor(cmd, g, f)
			if r == nil {
				return err
			}
			if err == nil && act != nil {
				if err = act(cmd, e, o, r); err != nil {
					r.Refused = err.Error()
				}
			}
			return finish(g, r, err)
		},
	}
	f.bind(cmd, true)
	return cmd
}

func newUpgradePlanCommand(g *GlobalOptions) *cobra.Command {
	return newStageCommand(g, "plan --to STAGE",
		"Show the steps from the current stage to STAGE, with the CRD change and the checks of each", "", nil)
}

func newUpgradePreflightCommand(g *GlobalOptions) *cobra.Command {
	return newStageCommand(g, "preflight --to STAGE",
		"Run the checks of every step to STAGE; exit 0 safe, 1 refused, 2 error",
		`preflight is what the chart's pre-install, pre-upgrade and pre-rollback hooks run: a
refusal fails the Helm operation with its message, which names the next safe step and its
runbook.`,
		func(cmd *cobra.Command, e *engine, o *upgrade.Observation, r *planReport) error {
			var err error
			r.Checks, err = upgrade.Preflight(cmd.Context(), e.clients, e.cfg, o, r.Steps)
			return err
		})
}

func newUpgradeApplyCommand(g *GlobalOptions) *cobra.Command {
	var progressNamespace string
	cmd := newStageCommand(g, "apply --to STAGE",
		"Check and make the CRD changes to STAGE (installations without Helm)",
		`apply runs the preflight of every step and makes each step's CRD change with an optimistic
lock; at migrate it also migrates the stored objects and trims storedVersions. It refuses a
CRD that Helm manages — a second owner of spec.versions would fight Helm — and prints the
helm upgrade to run instead.`,
		func(cmd *cobra.Command, e *engine, o *upgrade.Observation, r *planReport) error {
			if release, managed := upgrade.HelmManaged(o); managed {
				return &upgrade.Refusal{Message: fmt.Sprintf("CRD %s is managed by Helm (release %q): changing it here would fight Helm over spec.versions", o.CRD, release),
					Next: fmt.Sprintf("helm upgrade %s <chart> --reuse-values --set apiUpgrade.stage=%s", orDefault(release, "widget-operator"), r.To)}
			}
			var err error
			if r.Checks, err = upgrade.Preflight(cmd.Context(), e.clients, e.cfg, o, r.Steps); err != nil {
				return err
			}
			for _, s := range r.Steps {
				if err := upgrade.Apply(cmd.Context(), e.clients.Client, e.cfg, o, s); err != nil {
					return err
				}
				if s.To == crd.StageMigrate && s.Then != "" {
					if err := runStageMigration(cmd.Context(), g, e.cfg.CRD, progressNamespace); err != nil {
						return err
					}
				}
			}
			r.Applied = true
			return nil
		})
	cmd.Flags().StringVar(&progressNamespace, "progress-namespace", "", "namespace of the migration's progress ConfigMap (default: the context's namespace)")
	return cmd
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// runStageMigration migrates the stored objects at the migrate stage with the defaults of
// widgetctl migrate.
func runStageMigration(ctx context.Context, g *GlobalOptions, crdName, progressNamespace string) error {
	rc, err := g.RESTConfig()
	if err != nil {
		return err
	}
	m, err := migrate.New(rc)
	if err != nil {
		return err
	}
	if progressNamespace == "" {
		progressNamespace = g.Namespace()
	}
	res, err := m.Migrate(ctx, migrate.Options{CRD: crdName, ProgressNamespace: progressNamespace})
	if err != nil {
		return err
	}
	fmt.Fprintf(g.Stderr, "migrated %d objects of %s to %s (%s backend); storedVersions %v\n", res.Counts.Migrated, crdName, res.StorageVersion, res.Backend, res.StoredVersions)
	return nil
}
