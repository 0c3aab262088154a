package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/widgetry/widget-operator/internal/apiservers"
	"github.com/widgetry/widget-operator/internal/apitraffic"
	"github.com/widgetry/widget-operator/internal/census"
	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/scheme"
	"github.com/widgetry/widget-operator/internal/upgrade"
)

// This file holds `widgetctl upgrade` itself and what its subcommands share: the flags, the
// engine (clients and config), and the plan-to-a-target-stage command that plan, preflight
// and apply are built on. Each subcommand has its own file: upgrade_status.go,
// upgrade_plan.go, upgrade_preflight.go, upgrade_apply.go; the reports they print are in
// upgrade_report.go.

// NewUpgradeCommand builds `widgetctl upgrade` and its subcommands.
func NewUpgradeCommand(g *GlobalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "upgrade",
		Short: "Observe, plan, check and apply the staged API upgrade of a CRD",
		Long: `The staged upgrade moves a CRD from an old version to a new one in six stages:
initial -> add-version -> flip-storage -> migrate -> unserve -> remove, one stage at a time, each
with preflight checks; rollback is one stage back. The stage is read from the live CRD
(served/storage flags and status.storedVersions), never from Helm's history.`,
	}
	cmd.AddCommand(newUpgradeStatusCommand(g), newUpgradePlanCommand(g), newUpgradePreflightCommand(g), newUpgradeApplyCommand(g))
	return cmd
}

// upgradeFlags select the CRD and the version pair; the defaults are the Widget API's.
type upgradeFlags struct {
	crd, old, new string
	to            string
	webhookURL    string
	traffic       trafficFlags
	// allowOldManifests overrides the census of Helm releases (a reason).
	allowOldManifests string
	// allowUndrilled overrides the backup-drilled check (a reason).
	allowUndrilled string
}

// trafficFlags tune the count of requests through the old version (the preflight of unserve
// and remove, and status).
type trafficFlags struct {
	apiservers  apiserverFlags
	namespace   string
	window      time.Duration
	allowReason string
	auditLog    string
}

func (f *trafficFlags) bind(fl *pflag.FlagSet) {
	f.apiservers.bind(fl)
	fl.StringVar(&f.namespace, "records-namespace", "", "namespace of the ConfigMaps the upgrade keeps its records in: request counts between checks, backups taken (default: -n, else the release namespace of the Widget CRD, else the context's)")
	fl.DurationVar(&f.window, "old-version-traffic-window", upgrade.DefaultTrafficWindow, "unserve and remove are refused while the old version served requests within this window (and since the storage flip, for unserve)")
	fl.StringVar(&f.allowReason, "allow-old-version-traffic", "", "let unserve or remove through despite requests to the old version; the reason is recorded in an event on the CRD")
	fl.StringVar(&f.auditLog, "audit-log", "", "a kube-apiserver audit log (JSON lines) readable here: a refusal for old-version traffic then names the clients")
}

// check builds the engine's traffic check with c's credentials, subtracting the requests own
// counted.
func (f *trafficFlags) check(rc *rest.Config, c client.Client, crdName, recordsNamespace string, own *apitraffic.OwnCounter) (*upgrade.TrafficCheck, error) {
	if err := f.apiservers.validate(); err != nil {
		return nil, err
	}
	hc, err := apiservers.HTTPClient(rc, f.apiservers.serverName, 10*time.Second)
	if err != nil {
		return nil, err
	}
	instances := func(ctx context.Context) ([]string, error) {
		if len(f.apiservers.instances) > 0 {
			return f.apiservers.instances, nil
		}
		return apiservers.Instances(ctx, c)
	}
	return &upgrade.TrafficCheck{
		Ledger: apitraffic.Ledger{Client: c, Namespace: recordsNamespace, Name: apitraffic.LedgerName(crdName)},
		HTTP:   hc, Instances: instances, Window: f.window, AllowReason: f.allowReason, AuditLog: f.auditLog, Own: own,
	}, nil
}

func (f *upgradeFlags) bind(cmd *cobra.Command, withTarget bool) {
	fl := cmd.Flags()
	fl.StringVar(&f.crd, "crd", crd.WidgetName, "name of the CustomResourceDefinition")
	fl.StringVar(&f.old, "old-version", "v1alpha1", "the version being retired")
	fl.StringVar(&f.new, "new-version", "v1", "the version replacing it")
	fl.StringVar(&f.allowOldManifests, "allow-old-release-manifests", "", "let unserve or remove through despite Helm releases whose stored manifests declare the CRD's kind through the old version (widgetctl census lists them); the reason is recorded in an event on the CRD")
	fl.StringVar(&f.webhookURL, "webhook-url", "", "reach the conversion webhook here, verifying its certificate against the CRD's caBundle (the chart's hooks name the Service); by default the probe goes through the apiserver's service proxy, which needs only the kubeconfig")
	fl.StringVar(&f.allowUndrilled, "allow-undrilled-backup", "", "let unserve or remove through without a backup taken after the storage flip and drilled (widgetctl backup, widgetctl restore --drill); the reason is recorded in an event on the CRD")
	f.traffic.bind(fl)
	if withTarget {
		fl.StringVar(&f.to, "to", "", "target stage: "+crd.StageNames()+" (required)")
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
	cfg        upgrade.Config
	clients    upgrade.Clients
	apiservers apiserverFlags
}

func newEngine(ctx context.Context, g *GlobalOptions, f *upgradeFlags) (*engine, error) {
	rc, err := g.RESTConfig()
	if err != nil {
		return nil, err
	}
	c, err := g.NewClient(rc, scheme.New())
	if err != nil {
		return nil, fmt.Errorf("create a client: %w", err)
	}
	md, err := metadata.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	cfg := f.config()
	records, err := g.recordsNamespace(ctx, f.traffic.namespace)
	if err != nil {
		return nil, err
	}
	traffic, err := f.traffic.check(rc, c, cfg.CRD, records, g.ownRequests())
	if err != nil {
		return nil, err
	}
	cs, err := g.Clientset(rc)
	if err != nil {
		return nil, err
	}
	return &engine{cfg: cfg, apiservers: f.traffic.apiservers, clients: upgrade.Clients{Client: c, Metadata: md, DryRunNamespace: g.Namespace(),
		Probe: upgrade.ProbeOptions{URL: f.webhookURL, APIServer: rc}, Traffic: traffic, RecordsNamespace: records,
		Census: func(apiVersion, kind string) (*census.Result, error) {
			return census.Run(ctx, cs, c, apiVersion, kind)
		},
		AllowOldManifestsReason: f.allowOldManifests, AllowUndrilledReason: f.allowUndrilled}}, nil
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
		return "", refused(errors.New("--to STAGE is required: " + crd.StageNames()))
	}
	return crd.Stage(f.to), nil
}

// planFor observes and plans; a refusal is reported (JSON) and returned.
func planFor(cmd *cobra.Command, g *GlobalOptions, f *upgradeFlags) (*engine, *upgrade.Observation, *planReport, error) {
	target, err := parseTarget(f)
	if err != nil {
		return nil, nil, nil, err
	}
	e, err := newEngine(cmd.Context(), g, f)
	if err != nil {
		return nil, nil, nil, err
	}
	o, err := e.observe(cmd.Context())
	if err != nil {
		return nil, nil, nil, err
	}
	r := &planReport{CRD: o.CRD, From: o.StageLabel(), To: target}
	r.Steps, err = upgrade.Plan(o, e.cfg, target)
	if err != nil {
		r.Refused = err.Error()
	}
	return e, o, r, err
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

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}
