package releasestatus

import (
	"fmt"
	"strings"
	"time"

	certmanagerv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"

	"github.com/widgetry/widget-operator/internal/migrate"
	"github.com/widgetry/widget-operator/internal/scheme"
)

// Scheme is the scheme Options.Client needs.
func Scheme() *runtime.Scheme {
	s := scheme.New()
	utilruntime.Must(certmanagerv1.AddToScheme(s))
	utilruntime.Must(admissionregistrationv1.AddToScheme(s))
	return s
}

// causes names what is wrong, the most urgent first: what stops Widget requests, then what
// stops reconciling, then what will fail later.
func causes(r *Report, o Options) []Cause {
	out := append([]Cause{}, r.Causes...)
	add := func(runbook, format string, args ...any) {
		out = append(out, Cause{Summary: fmt.Sprintf(format, args...), Runbook: runbook})
	}
	// Each plane counted apart: two controllers Ready do not make up for the webhooks.
	var serving, servingReady, leading, leadingReady int
	for _, rep := range r.Replicas {
		if rep.Serves() {
			serving++
			if rep.Ready {
				servingReady++
			}
		}
		if rep.Leads() {
			leading++
			if rep.Ready {
				leadingReady++
			}
		}
	}
	switch {
	case serving == 0:
		add("runbooks/alerts/WidgetWebhookDown.md", "no webhook pod exists in %s: every Widget request fails at the webhooks", r.Namespace)
	case servingReady == 0:
		add("runbooks/alerts/WidgetWebhookDown.md", "none of %d webhook pods is Ready: every Widget request fails at the webhooks", serving)
	}
	for _, c := range r.Conversion {
		if !c.OK {
			add("runbooks/procedures/conversion-webhook-outage.md", "%s failed: %s", c.Check, c.Error)
		}
	}
	for _, rep := range r.Replicas {
		switch {
		case rep.Serving != nil && len(rep.Serving.Untrusted) > 0:
			add("runbooks/procedures/certificate-rotation.md", "pod %s serves certificate %s, which does not verify against: %s", rep.Pod, rep.Serving.Serial, strings.Join(rep.Serving.Untrusted, "; "))
		case rep.Serving != nil && rep.Serving.HeldRenewal != "":
			add("runbooks/alerts/WidgetWebhookCertificateRenewalHeld.md", "pod %s holds back renewal %s: a caBundle does not trust its CA yet", rep.Pod, rep.Serving.HeldRenewal)
		case rep.Serving != nil && rep.Serving.OlderThanCertificate:
			add("runbooks/procedures/certificate-rotation.md", "pod %s serves certificate %s (notAfter %s), older than the one cert-manager issued", rep.Pod, rep.Serving.Serial, rep.Serving.NotAfter.Format(time.RFC3339))
		case rep.ServingError != "" && rep.ServingError != "terminating":
			add("runbooks/alerts/WidgetWebhookDown.md", "pod %s: the certificate it serves is unknown: %s", rep.Pod, rep.ServingError)
		}
	}
	for _, c := range r.Certificates {
		switch {
		case c.Ready != "True":
			add("runbooks/procedures/certificate-rotation.md", "Certificate %s is not Ready (%s): %s", c.Name, c.Reason, c.Message)
		case c.RenewOverdue:
			add("runbooks/procedures/certificate-rotation.md", "Certificate %s was due for renewal at %s and is not renewed", c.Name, c.RenewalTime.Format(time.RFC3339))
		}
	}
	if r.Paused != nil {
		add("runbooks/alerts/WidgetControllerPaused.md", "the controller is paused by ConfigMap %s/widget-operator-paused since %s", r.Namespace, r.Paused.Since.Format(time.RFC3339))
	}
	switch {
	case leading == 0 && len(r.Replicas) > 0:
		add("runbooks/alerts/WidgetControllerNotRunning.md", "no controller pod exists in %s: no Widget is reconciled and no finalizer removed", r.Namespace)
	case leading > 0 && r.Leader == nil:
		add("runbooks/alerts/WidgetOperatorNoLeader.md", "no leader election Lease %s/%s: no controller has ever led", r.Namespace, LeaseName)
	case r.Leader != nil && r.Leader.Expired:
		add("runbooks/alerts/WidgetOperatorNoLeader.md", "the Lease held by %s was last renewed at %s and has expired: no controller leads", r.Leader.Holder, r.Leader.RenewTime.Format(time.RFC3339))
	}
	if m := r.Migration; m != nil {
		switch {
		case m.Phase == migrate.PhaseFailed:
			add("runbooks/alerts/WidgetStorageMigrationFailed.md", "the storage migration to %s failed (%d of %d done, %d errors): %s", m.StorageVersion, m.Done, m.Total, m.Errors, m.Message)
		case m.Phase == migrate.PhaseRunning && m.LastProgressTime != nil && o.Now.Sub(*m.LastProgressTime) > o.StallAfter:
			add("runbooks/alerts/WidgetStorageMigrationStalled.md", "the storage migration to %s has made no progress since %s (%d of %d done)", m.StorageVersion, m.LastProgressTime.Format(time.RFC3339), m.Done, m.Total)
		}
	}
	if r.Stage.Drift != "" {
		add("runbooks/upgrade/README.md", "stage drift: %s", r.Stage.Drift)
	}
	if rel := r.Release; rel != nil {
		if rel.Status != "deployed" {
			add("runbooks/upgrade/README.md", "Helm release %s revision %d is %s: %s", rel.Name, rel.Revision, rel.Status, rel.Description)
		}
		for _, h := range rel.Hooks {
			rev := rel.Revision
			if h.Revision != 0 {
				rev = h.Revision
			}
			if h.Phase == "Failed" && !h.Superseded {
				add("runbooks/upgrade/README.md", "hook %s %s of revision %d failed (kubectl -n %s logs job/%s)", h.Kind, h.Name, rev, r.Namespace, h.Name)
			}
		}
	} else if r.ReleaseError != "" {
		add("runbooks/upgrade/README.md", "the Helm release cannot be read: %s", r.ReleaseError)
	}
	if serving > 0 && servingReady < serving && servingReady > 0 {
		add("runbooks/alerts/WidgetOperatorDegraded.md", "%d of %d webhook pods are Ready", servingReady, serving)
	}
	switch {
	case leading > 0 && leadingReady == 0 && servingReady > 0:
		// The webhooks serve but no pod that can run the controller is Ready (with no webhook
		// Ready either, the outage reported first says it).
		add("runbooks/alerts/WidgetControllerNotRunning.md", "none of %d controller pods is Ready: no Widget is reconciled and no finalizer removed", leading)
	case leadingReady > 0 && leadingReady < leading:
		add("runbooks/alerts/WidgetOperatorDegraded.md", "%d of %d controller pods are Ready", leadingReady, leading)
	}
	return out
}
