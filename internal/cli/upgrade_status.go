package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/metalist"
	"github.com/widgetry/widget-operator/internal/upgrade"
)

// statusReport is `upgrade status`'s result.
type statusReport struct {
	*upgrade.Observation
	StageLabel    string `json:"stageLabel"`
	WebhookHealth string `json:"webhookHealth"`
	Objects       *int   `json:"objects,omitempty"`
	// OldVersionTraffic is what the kube-apiservers served through the old version within
	// the window the next stage's check uses.
	OldVersionTraffic string `json:"oldVersionTraffic,omitempty"`
	Next              string `json:"next,omitempty"`
}

// newUpgradeStatusCommand builds `widgetctl upgrade status`.
func newUpgradeStatusCommand(g *GlobalOptions) *cobra.Command {
	f := &upgradeFlags{}
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the CRD's versions, flags, storedVersions, stage, conversion webhook health and object count",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			e, err := newEngine(cmd.Context(), g, f)
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
				r.WebhookHealth = "ok: " + o.Old.Name + " -> " + o.New.Name + " -> " + o.Old.Name + " round trip through the apiserver's service proxy"
				if f.webhookURL != "" {
					r.WebhookHealth = "ok: " + o.Old.Name + " -> " + o.New.Name + " -> " + o.Old.Name + " round trip over TLS verified with the CRD's caBundle"
				}
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
			if o.Exists && o.New.Present {
				traffic, err := upgrade.TrafficReport(ctx, e.clients.Traffic, e.cfg, o)
				if err != nil {
					traffic = "not counted: " + err.Error()
				}
				r.OldVersionTraffic = traffic
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
		return "repair the CRD by hand (runbooks/README.md lists the stage pages)"
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
		if r.OldVersionTraffic != "" {
			fmt.Fprintf(tw, "Old version traffic\t%s\n", r.OldVersionTraffic)
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
	version, _ := apihelpers.GetCRDStorageVersion(live)
	gvr := schema.GroupVersionResource{Group: live.Spec.Group, Version: version, Resource: live.Spec.Names.Plural}
	n := 0
	err := metalist.Each(ctx, md.Resource(gvr), func(*metav1.PartialObjectMetadata) error {
		n++
		return nil
	})
	return n, err
}
