package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/widgetry/widget-operator/internal/releasestatus"
)

// errCausesFound makes status exit 1 when it names something wrong; the report says what.
var errCausesFound = errors.New("status found causes to act on (listed above, each with its runbook)")

// NewStatusCommand builds `widgetctl status`, on call's one view of a release.
func NewStatusCommand(g *GlobalOptions) *cobra.Command {
	var release string
	var helmStorage bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "One view of the release: Helm revision and stage, the CRD's stage, Certificates, caBundles against the served certificates, replicas, leader, migration, pause, conversion",
		Long: `status reads, through the apiserver only (a kubeconfig is enough, no cluster DNS or
port-forward): the release (the revision applied, its chart and apiUpgrade.stage value, from the
release-info ConfigMap the chart renders, and its failed or running hook Jobs; with --helm-storage,
Helm's own records, written by Helm 3 or Helm 4), the stage the CRD is actually at and any drift between the two, cert-manager's
Certificates, the caBundles of the CRD and both webhook configurations against the certificate
each replica serves (asked through the apiserver's pod proxy), replicas and leader, the storage
migration's progress, the pause marker, and the conversion path (a ConversionReview through the
service proxy, then a read and a dry-run create through each served version).

The release namespace is -n, else the one that installed the Widget CRD.
Exit codes: 0 nothing wrong, 1 causes found (each listed with its runbook), 2 could not read.`,
		Example: `  kubectl widget status
  kubectl widget status -n widget-system -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			rc, err := g.RESTConfig()
			if err != nil {
				return err
			}
			c, err := client.New(rc, client.Options{Scheme: releasestatus.Scheme()})
			if err != nil {
				return fmt.Errorf("create a client: %w", err)
			}
			cs, err := g.Clientset(rc)
			if err != nil {
				return err
			}
			ns, err := g.findReleaseNamespace(ctx, c)
			if err != nil {
				return err
			}
			r, err := releasestatus.Gather(ctx, releasestatus.Options{Client: c, Clientset: cs, REST: rc, Namespace: ns.Namespace,
				Release: release, HelmStorage: helmStorage, HelmDriver: os.Getenv("HELM_DRIVER")})
			if err != nil {
				return err
			}
			if g.Output == OutputJSON {
				if err := writeJSON(g.Stdout, r); err != nil {
					return err
				}
			} else {
				printReleaseStatus(g.Stdout, r, ns)
			}
			if len(r.Causes) > 0 {
				return refused(errCausesFound)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&release, "release", "", "Helm release name (default: the release that installed the Widget CRD)")
	cmd.Flags().BoolVar(&helmStorage, "helm-storage", false, "read the release from Helm's own records (HELM_DRIVER: secret or configmap) for its status, description and every hook's last run; "+
		"needs list on Secrets in the release namespace, which shows every Secret there, the CA's private key among them")
	return cmd
}

func printReleaseStatus(w io.Writer, r *releasestatus.Report, ns namespaceFound) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	defer func() { _ = tw.Flush() }()
	ts := func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return t.UTC().Format(time.RFC3339)
	}
	fmt.Fprintf(tw, "Namespace\t%s (from %s)\n", r.Namespace, ns.Source)
	if rel := r.Release; rel != nil {
		fmt.Fprintf(tw, "Release\t%s revision %d, %s (%s), chart %s-%s, app %s, updated %s, read from %s\n", rel.Name, rel.Revision, rel.Status, rel.Description,
			rel.Chart, rel.ChartVersion, rel.AppVersion, rel.Updated.UTC().Format(time.RFC3339), rel.Source)
		for _, h := range rel.Hooks {
			of := ""
			if h.Revision != 0 {
				of = fmt.Sprintf(" of revision %d", h.Revision)
			}
			if h.Superseded {
				of += " (superseded, kept for its log)"
			}
			fmt.Fprintf(tw, "  hook %s\t%s %s%s: %s (started %s, completed %s)\n", h.Name, h.Kind, strings.Join(h.Events, ","), of, orDefault(h.Phase, "not run"), ts(h.StartedAt), ts(h.CompletedAt))
		}
	} else {
		fmt.Fprintf(tw, "Release\tunreadable: %s\n", r.ReleaseError)
	}
	fmt.Fprintf(tw, "Stage\tchart %s, cluster %s\n", orDefault(r.Stage.Chart, "-"), r.Stage.Cluster)
	if r.Stage.Drift != "" {
		fmt.Fprintf(tw, "  drift\t%s\n", r.Stage.Drift)
	}
	fmt.Fprintln(tw, "\nCERTIFICATE\tREADY\tNOT AFTER\tRENEWAL\tISSUER\tSERVING")
	for _, c := range r.Certificates {
		ready := c.Ready
		if c.Reason != "" {
			ready += " (" + c.Reason + ")"
		}
		renewal := ts(c.RenewalTime)
		if c.RenewOverdue {
			renewal += " OVERDUE"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", c.Name, ready, ts(c.NotAfter), renewal, c.Issuer, yesNo(c.Serving))
	}
	fmt.Fprintln(tw, "\nCABUNDLE\tCAS")
	for _, b := range r.CABundles {
		fmt.Fprintf(tw, "%s\t%s\n", b.Source, strings.Join(b.CAs, "; "))
	}
	fmt.Fprintln(tw, "\nPOD\tPLANE\tREADY\tLEADER\tRESTARTS\tSERVES")
	for _, rep := range r.Replicas {
		var restarts []string
		for name, n := range rep.Restarts {
			restarts = append(restarts, fmt.Sprintf("%s=%d", name, n))
		}
		serves := rep.ServingError
		if s := rep.Serving; s != nil {
			serves = fmt.Sprintf("serial %s, notAfter %s", s.Serial, s.NotAfter.UTC().Format(time.RFC3339))
			if len(s.Untrusted) > 0 {
				serves += ", UNTRUSTED by " + strings.Join(s.Untrusted, "; ")
			} else {
				serves += ", trusted by every caBundle"
			}
			if s.HeldRenewal != "" {
				serves += ", holding renewal " + s.HeldRenewal
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", rep.Pod, rep.Plane, yesNo(rep.Ready), yesNo(rep.Leader), strings.Join(slices.Sorted(slices.Values(restarts)), ","), serves)
	}
	if l := r.Leader; l != nil {
		fmt.Fprintf(tw, "\nLeader\t%s (renewed %s%s)\n", l.Holder, ts(l.RenewTime), map[bool]string{true: ", EXPIRED", false: ""}[l.Expired])
	}
	if m := r.Migration; m != nil {
		fmt.Fprintf(tw, "Migration\t%s to %s: %d of %d done, %d errors, last progress %s %s\n", m.Phase, m.StorageVersion, m.Done, m.Total, m.Errors, ts(m.LastProgressTime), m.Message)
	}
	if r.Paused != nil {
		fmt.Fprintf(tw, "Paused\tsince %s\n", r.Paused.Since.UTC().Format(time.RFC3339))
	}
	fmt.Fprintln(tw, "\nCONVERSION CHECK\tRESULT")
	for _, c := range r.Conversion {
		fmt.Fprintf(tw, "%s\t%s\n", c.Check, map[bool]string{true: "ok", false: "FAILED: " + c.Error}[c.OK])
	}
	fmt.Fprintln(tw)
	if len(r.Causes) == 0 {
		fmt.Fprintln(tw, "Causes\tnone found")
		return
	}
	fmt.Fprintln(tw, "CAUSE\tRUNBOOK")
	for _, c := range r.Causes {
		fmt.Fprintf(tw, "%s\t%s\n", c.Summary, c.Runbook)
	}
}
