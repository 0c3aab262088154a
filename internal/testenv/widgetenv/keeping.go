package widgetenv

import (
	"context"
	"fmt"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/widgetry/widget-operator/api/v1alpha1"
	"github.com/widgetry/widget-operator/internal/chart/helmtemplate"
	"github.com/widgetry/widget-operator/internal/conversion"
	"github.com/widgetry/widget-operator/internal/testenv"
)

// MutatingAdmissionPolicyAPI is the capability the chart renders its MutatingAdmissionPolicy
// for (webhook.mutation auto).
const MutatingAdmissionPolicyAPI = "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"

// WithoutMutatingAdmissionPolicy are kube-apiserver flags of a cluster that does not serve
// MutatingAdmissionPolicy. The runtime-config alone leaves the apiserver never ready (its
// MutatingAdmissionPolicy admission plugin waits for an informer of a resource no longer
// served), so the plugin goes too.
var WithoutMutatingAdmissionPolicy = map[string]string{
	"runtime-config":            "admissionregistration.k8s.io/v1/mutatingadmissionpolicies=false,admissionregistration.k8s.io/v1/mutatingadmissionpolicybindings=false",
	"disable-admission-plugins": "MutatingAdmissionPolicy",
}

// DiscoveredAPIVersions lists what env's apiserver serves the way helm's capabilities do
// ("group/version" and "group/version/Kind"), so that helm template renders the chart as helm
// install would for that cluster.
func DiscoveredAPIVersions(tb testing.TB, env *testenv.Env) []string {
	tb.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(env.Config)
	if err != nil {
		tb.Fatal(err)
	}
	_, lists, err := dc.ServerGroupsAndResources()
	if err != nil {
		tb.Fatalf("widgetenv: discovery: %v", err)
	}
	var out []string
	for _, l := range lists {
		out = append(out, l.GroupVersion)
		for _, r := range l.APIResources {
			out = append(out, l.GroupVersion+"/"+r.Kind)
		}
	}
	return out
}

// Keeping is what the chart renders to keep, for v1alpha1 writers, the v1 fields that version
// cannot express: the MutatingWebhookConfiguration and, where the cluster serves it, the
// MutatingAdmissionPolicy and its binding.
type Keeping struct {
	env       *testenv.Env
	namespace string
	// Webhook is the configuration as rendered (its clientConfig replaced by a URL).
	Webhook *admissionregistrationv1.MutatingWebhookConfiguration
	// Policy and Binding are nil when the chart chose the webhook alone.
	Policy  *admissionregistrationv1.MutatingAdmissionPolicy
	Binding *admissionregistrationv1.MutatingAdmissionPolicyBinding
	// paths are the chart's webhook paths by webhook name.
	paths map[string]string
}

// InstallKeeping renders the chart for the API versions apis (see DiscoveredAPIVersions) and
// values, creates what it renders to keep v1-only fields with the webhook pointed at a port
// where nothing listens, and waits until a policy it rendered is in effect (a v1alpha1 write
// that would lose paused keeps it, which with nothing listening only the policy can do).
// Probe Widgets go to namespace, which must exist. Point the webhook somewhere with
// PointWebhook.
func InstallKeeping(tb testing.TB, env *testenv.Env, namespace string, apis []string, values map[string]any) *Keeping {
	tb.Helper()
	objs := renderChart(tb, apis, values)
	k := &Keeping{env: env, namespace: namespace, Webhook: &admissionregistrationv1.MutatingWebhookConfiguration{}}
	webhooks := objs.Kind("MutatingWebhookConfiguration")
	if len(webhooks) != 1 {
		tb.Fatalf("widgetenv: the chart rendered %d MutatingWebhookConfigurations, want 1", len(webhooks))
	}
	if err := helmtemplate.Into(webhooks[0], k.Webhook); err != nil {
		tb.Fatal(err)
	}
	switch p, b := objs.Kind("MutatingAdmissionPolicy"), objs.Kind("MutatingAdmissionPolicyBinding"); {
	case len(p) == 1 && len(b) == 1:
		k.Policy, k.Binding = &admissionregistrationv1.MutatingAdmissionPolicy{}, &admissionregistrationv1.MutatingAdmissionPolicyBinding{}
		if err := helmtemplate.Into(p[0], k.Policy); err != nil {
			tb.Fatal(err)
		}
		if err := helmtemplate.Into(b[0], k.Binding); err != nil {
			tb.Fatal(err)
		}
	case len(p) != 0 || len(b) != 0:
		tb.Fatalf("widgetenv: the chart rendered %d MutatingAdmissionPolicies and %d bindings, want one of each or none", len(p), len(b))
	}

	k.Webhook.SetAnnotations(nil) // cainjector's: nothing injects here
	k.paths = map[string]string{}
	for _, w := range k.Webhook.Webhooks {
		if w.ClientConfig.Service == nil {
			tb.Fatalf("widgetenv: the chart's webhook %s calls no Service", w.Name)
		}
		k.paths[w.Name] = ptr.Deref(w.ClientConfig.Service.Path, "")
	}
	k.setWebhookURL(Unreachable(tb))
	create := []client.Object{k.Webhook}
	if k.Policy != nil {
		create = []client.Object{k.Policy, k.Binding, k.Webhook}
	}
	for _, o := range create {
		if err := env.Client.Create(context.Background(), o); err != nil {
			tb.Fatalf("widgetenv: create %T %s: %v", o, o.GetName(), err)
		}
	}
	if k.Policy != nil {
		// With nothing listening, only the policy keeps paused; until the apiserver has
		// loaded it the webhook is called for this write and the write fails.
		k.probe(tb, "policy-probe", `{"paused":true}`, `{"paused":true}`, "the MutatingAdmissionPolicy in effect")
	}
	return k
}

func (k *Keeping) setWebhookURL(base string, caPEM []byte) {
	for i, w := range k.Webhook.Webhooks {
		k.Webhook.Webhooks[i].ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: ptr.To(base + k.paths[w.Name]), CABundle: caPEM}
	}
}

// PointWebhook points the mutating webhook at base ("https://127.0.0.1:PORT", the path is the
// chart's), trusting caPEM, and waits until the apiserver calls it there: a v1alpha1 write
// over a stored annotation the policy cannot read keeps paused, which only the webhook can.
func (k *Keeping) PointWebhook(tb testing.TB, base string, caPEM []byte) {
	tb.Helper()
	testenv.Eventually(tb, 30*time.Second, "update the MutatingWebhookConfiguration", func() error {
		live := &admissionregistrationv1.MutatingWebhookConfiguration{}
		if err := k.env.Client.Get(context.Background(), client.ObjectKeyFromObject(k.Webhook), live); err != nil {
			return err
		}
		k.Webhook = live
		k.setWebhookURL(base, caPEM)
		return k.env.Client.Update(context.Background(), k.Webhook)
	})
	k.probe(tb, "webhook-probe", `{"paused": true}`, `{"paused":true}`, "the mutating webhook at "+base)
}

// probe stores a paused Widget whose annotation is stored, then retries a dry-run v1alpha1
// update without annotations until the answer carries want.
func (k *Keeping) probe(tb testing.TB, name, stored, want, what string) {
	tb.Helper()
	ctx := context.Background()
	w := &v1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: k.namespace, Name: name, Annotations: map[string]string{conversion.DataAnnotation: stored}},
		Spec: v1alpha1.WidgetSpec{Image: "probe:1"}}
	if err := k.env.Client.Create(ctx, w); err != nil {
		tb.Fatalf("widgetenv: create probe %s: %v", name, err)
	}
	defer func() {
		if err := k.env.Client.Delete(ctx, w); err != nil && !apierrors.IsNotFound(err) {
			tb.Errorf("widgetenv: delete probe %s: %v", name, err)
		}
	}()
	testenv.Eventually(tb, 30*time.Second, what, func() error {
		req := w.DeepCopy()
		req.Annotations, req.Spec.Image = nil, "probe:2"
		if err := k.env.Client.Update(ctx, req, client.DryRunAll); err != nil {
			return err
		}
		if got := req.Annotations[conversion.DataAnnotation]; got != want {
			return fmt.Errorf("a dry-run update without annotations was stored with %q, want %q", got, want)
		}
		return nil
	})
}
