package releasestatus

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	certmanagerv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"helm.sh/helm/v4/pkg/storage"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/widgetry/widget-operator/internal/cabundle"
	"github.com/widgetry/widget-operator/internal/certtrust"
	"github.com/widgetry/widget-operator/internal/controller"
	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/migrate"
	"github.com/widgetry/widget-operator/internal/upgrade"
)

// Labels and names the chart gives its objects.
const (
	instanceLabel  = "app.kubernetes.io/instance"
	componentLabel = "app.kubernetes.io/component"
	// The planes' components; legacyComp was the single-Deployment layout's, whose pods ran
	// the webhooks in the container legacyContainer and the controller beside it.
	webhookComp     = "webhook"
	controllerComp  = "controller"
	legacyComp      = "manager"
	legacyContainer = "manager"
	webhookPortName = "webhook"
	// LeaseName is the controller's leader election Lease in the release namespace.
	LeaseName = "widget-operator.widgetry.io"
	// helmReleaseNameAnnotation is Helm's ownership annotation; the CRD carries it.
	helmReleaseNameAnnotation = "meta.helm.sh/release-name"
)

// Options say where to look.
type Options struct {
	// Client reads with a scheme that knows core, coordination, apiextensions,
	// admissionregistration, cert-manager and the Widget types (Scheme()).
	Client    client.Client
	Clientset kubernetes.Interface
	// REST is the configuration of both, for the apiserver's service proxy.
	REST      *rest.Config
	Namespace string
	// Release names the Helm release; empty: the CRD's release, else the one release of the
	// chart in Namespace.
	Release string
	// HelmStorage reads the release from Helm's own records (HelmDriver: secret, the default,
	// or configmap), which needs list on Secrets in Namespace; otherwise from the release-info
	// ConfigMap and the hook Jobs, which `view` reads.
	HelmStorage bool
	HelmDriver  string
	Now         time.Time
	// RenewalGrace is how long after its renewal time a Certificate counts as overdue.
	RenewalGrace time.Duration
	// StallAfter is how long a running migration may make no progress.
	StallAfter time.Duration
}

// Gather reads everything and names the causes. It fails only when the cluster cannot be
// asked at all; each part that cannot be read is reported in its place.
func Gather(ctx context.Context, o Options) (*Report, error) {
	if o.Now.IsZero() {
		o.Now = time.Now()
	}
	if o.RenewalGrace == 0 {
		o.RenewalGrace = time.Hour
	}
	if o.StallAfter == 0 {
		o.StallAfter = 15 * time.Minute
	}
	r := &Report{Namespace: o.Namespace, Certificates: []Cert{}, CABundles: []Bundle{}, Replicas: []Replica{}, Conversion: []Conversion{}, Causes: []Cause{}}
	cfg := upgrade.WidgetConfig()
	live := &apiextensionsv1.CustomResourceDefinition{}
	liveErr := o.Client.Get(ctx, client.ObjectKey{Name: crd.WidgetName}, live)
	if liveErr != nil && !apierrors.IsNotFound(liveErr) {
		return nil, fmt.Errorf("read CRD %s: %w", crd.WidgetName, liveErr)
	}
	if o.Release == "" && liveErr == nil {
		o.Release = live.Annotations[helmReleaseNameAnnotation]
	}

	var err error
	if o.HelmStorage {
		var st *storage.Storage
		if st, err = ReleaseStorage(o.Clientset, o.Namespace, o.HelmDriver); err == nil {
			r.Release, err = readRelease(st, o.Release)
		}
	} else {
		r.Release, err = readReleaseInfo(ctx, o.Client, o.Namespace, o.Release)
	}
	if err != nil {
		r.ReleaseError = err.Error()
	} else if o.Release == "" {
		o.Release = r.Release.Name
	}

	if liveErr == nil {
		obs := upgrade.ObserveCRD(live, cfg)
		r.Stage.Observation, r.Stage.Cluster = obs, obs.StageLabel()
	} else {
		r.Stage.Cluster = "none (CRD not installed)"
	}
	if r.Release != nil {
		r.Stage.Chart = r.Release.Stage
		r.Stage.Drift = stageDrift(r.Stage)
	}

	r.Certificates = gatherCertificates(ctx, o, live, liveErr == nil, r)
	judges := gatherBundles(ctx, o, live, liveErr == nil, r)
	gatherReplicas(ctx, o, judges, r)
	gatherLeader(ctx, o, r)
	gatherRecords(ctx, o, r)
	if liveErr == nil {
		gatherConversion(ctx, o, live, cfg, r)
	}
	r.Causes = causes(r, o)
	return r, nil
}

// stageDrift compares the stage Helm rendered with the CRD's.
func stageDrift(s StageReport) string {
	o := s.Observation
	switch {
	case s.Chart == "" || o == nil || !o.Exists:
		return ""
	case o.Inconsistent != "":
		return fmt.Sprintf("the chart renders %s, the CRD is inconsistent: %s", s.Chart, o.Inconsistent)
	case s.Chart == string(crd.StageMigrate) && o.Stage == crd.StageFlipStorage:
		return "the chart renders migrate but storedVersions still lists the old version: the migrate hook has not finished (or the release was upgraded with --no-hooks)"
	case s.Chart != string(o.Stage):
		return fmt.Sprintf("the chart renders %s but the CRD is at %s: a hook failed or was skipped, or the CRD was edited by hand", s.Chart, o.StageLabel())
	}
	return ""
}

func gatherCertificates(ctx context.Context, o Options, live *apiextensionsv1.CustomResourceDefinition, haveCRD bool, r *Report) []Cert {
	out := []Cert{}
	var list certmanagerv1.CertificateList
	opts := []client.ListOption{client.InNamespace(o.Namespace)}
	if o.Release != "" {
		opts = append(opts, client.MatchingLabels{instanceLabel: o.Release})
	}
	if err := o.Client.List(ctx, &list, opts...); err != nil {
		r.Causes = append(r.Causes, Cause{Summary: "cannot list cert-manager Certificates: " + err.Error(), Runbook: "runbooks/procedures/certificate-rotation.md"})
		return out
	}
	serviceDNS := ""
	if haveCRD {
		if cv := live.Spec.Conversion; cv != nil && cv.Webhook != nil && cv.Webhook.ClientConfig != nil && cv.Webhook.ClientConfig.Service != nil {
			serviceDNS = cv.Webhook.ClientConfig.Service.Name + "." + cv.Webhook.ClientConfig.Service.Namespace + ".svc"
		}
	}
	for _, c := range list.Items {
		cert := Cert{Name: c.Name, SecretName: c.Spec.SecretName, DNSNames: c.Spec.DNSNames, Ready: "Unknown",
			Issuer: c.Spec.IssuerRef.Kind + "/" + c.Spec.IssuerRef.Name, Serving: serviceDNS != "" && slices.Contains(c.Spec.DNSNames, serviceDNS)}
		for _, cond := range c.Status.Conditions {
			if cond.Type == certmanagerv1.CertificateConditionReady {
				cert.Ready, cert.Reason, cert.Message = string(cond.Status), cond.Reason, cond.Message
			}
		}
		if c.Status.NotAfter != nil {
			t := c.Status.NotAfter.Time
			cert.NotAfter = &t
		}
		if c.Status.RenewalTime != nil {
			t := c.Status.RenewalTime.Time
			cert.RenewalTime = &t
			cert.RenewOverdue = o.Now.After(t.Add(o.RenewalGrace))
		}
		out = append(out, cert)
	}
	return out
}

// gatherBundles reads the caBundles of the CRD and of the release's webhook configurations.
func gatherBundles(ctx context.Context, o Options, live *apiextensionsv1.CustomResourceDefinition, haveCRD bool, r *Report) []certtrust.Judge {
	var judges []certtrust.Judge
	if haveCRD {
		if j, ok, err := certtrust.CRDJudge(live); err == nil && ok {
			judges = append(judges, j)
		}
	}
	sel := client.MatchingLabels{instanceLabel: o.Release}
	admission := func(kind, name string, ccs []admissionregistrationv1.WebhookClientConfig) {
		if js, err := certtrust.AdmissionJudges(kind, name, ccs); err == nil {
			judges = append(judges, js...)
		}
	}
	var mutating admissionregistrationv1.MutatingWebhookConfigurationList
	if err := o.Client.List(ctx, &mutating, sel); err == nil {
		for _, m := range mutating.Items {
			admission("MutatingWebhookConfiguration", m.Name, clientConfigs(m.Webhooks, func(w admissionregistrationv1.MutatingWebhook) admissionregistrationv1.WebhookClientConfig {
				return w.ClientConfig
			}))
		}
	}
	var validating admissionregistrationv1.ValidatingWebhookConfigurationList
	if err := o.Client.List(ctx, &validating, sel); err == nil {
		for _, v := range validating.Items {
			admission("ValidatingWebhookConfiguration", v.Name, clientConfigs(v.Webhooks, func(w admissionregistrationv1.ValidatingWebhook) admissionregistrationv1.WebhookClientConfig {
				return w.ClientConfig
			}))
		}
	}
	seen := map[string]bool{}
	for _, j := range judges {
		if seen[j.Source] {
			continue
		}
		seen[j.Source] = true
		b := Bundle{Source: j.Source, CAs: []string{}}
		certs, err := cabundle.Parse(j.CABundle)
		if err != nil {
			b.CAs = append(b.CAs, "unreadable: "+err.Error())
		}
		for _, c := range certs {
			b.CAs = append(b.CAs, cabundle.Describe(c))
		}
		r.CABundles = append(r.CABundles, b)
	}
	return judges
}

// clientConfigs are the client configurations of a configuration's webhooks.
func clientConfigs[W any](webhooks []W, of func(W) admissionregistrationv1.WebhookClientConfig) []admissionregistrationv1.WebhookClientConfig {
	out := make([]admissionregistrationv1.WebhookClientConfig, 0, len(webhooks))
	for _, w := range webhooks {
		out = append(out, of(w))
	}
	return out
}

func gatherReplicas(ctx context.Context, o Options, judges []certtrust.Judge, r *Report) {
	var pods corev1.PodList
	planes, err := labels.NewRequirement(componentLabel, selection.In, []string{webhookComp, controllerComp, legacyComp})
	if err != nil {
		panic(err) // constant arguments
	}
	selector := labels.SelectorFromSet(labels.Set{instanceLabel: o.Release}).Add(*planes)
	if err := o.Client.List(ctx, &pods, client.InNamespace(o.Namespace), client.MatchingLabelsSelector{Selector: selector}); err != nil {
		r.Causes = append(r.Causes, Cause{Summary: "cannot list the webhook and controller pods: " + err.Error(), Runbook: "runbooks/alerts/WidgetWebhookDown.md"})
		return
	}
	var serving *Cert
	for i := range r.Certificates {
		if r.Certificates[i].Serving {
			serving = &r.Certificates[i]
		}
	}
	for _, p := range pods.Items {
		rep := Replica{Pod: p.Name, Plane: p.Labels[componentLabel], Node: p.Spec.NodeName, Phase: string(p.Status.Phase), Restarts: map[string]int32{}}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady {
				rep.Ready = c.Status == corev1.ConditionTrue
			}
		}
		for _, cs := range p.Status.ContainerStatuses {
			rep.Restarts[cs.Name] = cs.RestartCount
		}
		port := webhookPort(&p)
		switch {
		case !rep.Serves():
			// The controller plane serves no webhook.
		case p.DeletionTimestamp != nil:
			rep.ServingError = "terminating"
		case p.Status.Phase != corev1.PodRunning:
			rep.ServingError = "not running"
		case port == 0:
			rep.ServingError = "no container port named webhook"
		default:
			served, err := servedBy(ctx, o, p.Name, port)
			if err != nil {
				rep.ServingError = err.Error()
			} else {
				rep.Serving = judgeServed(served, judges, serving, o.Now)
			}
		}
		r.Replicas = append(r.Replicas, rep)
	}
}

func webhookPort(p *corev1.Pod) int {
	for _, c := range p.Spec.Containers {
		for _, port := range c.Ports {
			if port.Name == webhookPortName && (c.Name == webhookComp || c.Name == legacyContainer || len(p.Spec.Containers) == 1) {
				return int(port.ContainerPort)
			}
		}
	}
	return 0
}

// servedBy asks a replica for the chain it presents, through the apiserver's pod proxy.
func servedBy(ctx context.Context, o Options, pod string, port int) (*certtrust.Served, error) {
	raw, err := o.Clientset.CoreV1().Pods(o.Namespace).ProxyGet("https", pod, fmt.Sprint(port), certtrust.ServedPath, nil).DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("ask it through the apiserver's pod proxy: %w", err)
	}
	var s certtrust.Served
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("answer of %s: %w", certtrust.ServedPath, err)
	}
	return &s, nil
}

// judgeServed checks a replica's chain against every caBundle and against the Certificate.
func judgeServed(s *certtrust.Served, judges []certtrust.Judge, serving *Cert, now time.Time) *ServedCert {
	chain, err := cabundle.Parse([]byte(s.Chain))
	if err != nil || len(chain) == 0 {
		return &ServedCert{Untrusted: []string{"no certificate loaded"}}
	}
	leaf := chain[0]
	out := &ServedCert{Serial: serial(leaf), NotAfter: leaf.NotAfter, Issuer: leaf.Issuer.String()}
	// The same judgement as the replica's own certificate-trust readiness check.
	served := &tls.Certificate{Leaf: leaf}
	for _, c := range chain {
		served.Certificate = append(served.Certificate, c.Raw)
	}
	verdicts, err := certtrust.Verify(served, judges, now)
	if err != nil {
		return &ServedCert{Untrusted: []string{err.Error()}}
	}
	for _, v := range verdicts {
		if v.Err != nil {
			out.Untrusted = append(out.Untrusted, v.Err.Error())
		}
	}
	if serving != nil && serving.NotAfter != nil && leaf.NotAfter.Before(serving.NotAfter.Add(-time.Second)) {
		out.OlderThanCertificate = true
	}
	if held, err := cabundle.Parse([]byte(s.Held)); err == nil && len(held) > 0 {
		out.HeldRenewal = serial(held[0])
	}
	return out
}

func serial(c *x509.Certificate) string {
	return strings.ToLower(hex.EncodeToString(c.SerialNumber.Bytes()))
}

func gatherLeader(ctx context.Context, o Options, r *Report) {
	var lease coordinationv1.Lease
	if err := o.Client.Get(ctx, client.ObjectKey{Namespace: o.Namespace, Name: LeaseName}, &lease); err != nil {
		return
	}
	l := &Leader{}
	if lease.Spec.HolderIdentity != nil {
		l.Holder = *lease.Spec.HolderIdentity
	}
	if lease.Spec.RenewTime != nil {
		t := lease.Spec.RenewTime.Time
		l.RenewTime = &t
		d := 15 * time.Second
		if lease.Spec.LeaseDurationSeconds != nil {
			d = time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second
		}
		l.Expired = o.Now.After(t.Add(d))
	}
	r.Leader = l
	for i := range r.Replicas {
		// The holder identity is the pod name (the chart passes it), with a suffix controller-runtime may add.
		r.Replicas[i].Leader = l.Holder == r.Replicas[i].Pod || strings.HasPrefix(l.Holder, r.Replicas[i].Pod+"_")
	}
}

func gatherRecords(ctx context.Context, o Options, r *Report) {
	var cm corev1.ConfigMap
	if err := o.Client.Get(ctx, client.ObjectKey{Namespace: o.Namespace, Name: migrate.ProgressObjectName(crd.WidgetName)}, &cm); err == nil {
		p := migrate.DecodeProgress(&cm)
		m := &Migration{Phase: p.Phase, StorageVersion: p.StorageVersion, Done: p.Counts.Done(), Total: p.Total, Errors: p.Counts.Error, Message: p.Message}
		if !p.LastProgressTime.IsZero() {
			t := p.LastProgressTime
			m.LastProgressTime = &t
		}
		r.Migration = m
	}
	cm = corev1.ConfigMap{}
	if err := o.Client.Get(ctx, client.ObjectKey{Namespace: o.Namespace, Name: controller.PausedConfigMap}, &cm); err == nil {
		r.Paused = &Pause{Since: cm.CreationTimestamp.Time}
	}
}

// gatherConversion checks the conversion path the way the apiserver uses it: a ConversionReview
// round trip through the service proxy, then through each served version a read and a
// dry-run create (both go through the apiserver's own webhook client, its TLS and caBundle).
func gatherConversion(ctx context.Context, o Options, live *apiextensionsv1.CustomResourceDefinition, cfg upgrade.Config, r *Report) {
	add := func(check string, err error) {
		c := Conversion{Check: check, OK: err == nil}
		if err != nil {
			c.Error = err.Error()
		}
		r.Conversion = append(r.Conversion, c)
	}
	if cv := live.Spec.Conversion; cv != nil && cv.Strategy == apiextensionsv1.WebhookConverter {
		add("round trip through the apiserver's service proxy", upgrade.ProbeConversion(ctx, live, cfg, upgrade.ProbeOptions{APIServer: o.REST}))
	}
	storage := ""
	for _, v := range live.Spec.Versions {
		if v.Storage {
			storage = v.Name
		}
	}
	for _, v := range live.Spec.Versions {
		if !v.Served {
			continue
		}
		gvk := schema.GroupVersionKind{Group: live.Spec.Group, Version: v.Name, Kind: live.Spec.Names.Kind}
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(live.Spec.Names.ListKind))
		what := "read through " + v.Name
		if v.Name != storage {
			what += " (converted from " + storage + ")"
		}
		add(what, o.Client.List(ctx, list, client.Limit(20)))
		probe := cfg.ProbeObject
		if v.Name == cfg.New {
			probe = cfg.NewProbeObject
		}
		if probe == nil {
			continue
		}
		obj := &unstructured.Unstructured{Object: probe()}
		obj.SetGroupVersionKind(gvk)
		obj.SetNamespace(o.Namespace)
		obj.SetName("widgetctl-status-probe")
		add("dry-run create through "+v.Name+" (admission webhooks"+map[bool]string{true: ", conversion to " + storage, false: ""}[v.Name != storage]+")",
			o.Client.Create(ctx, obj, client.DryRunAll))
	}
}
