package widgetenv

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"sync/atomic"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/widgetry/widget-operator/internal/chart/helmtemplate"
	"github.com/widgetry/widget-operator/internal/testenv"
	"github.com/widgetry/widget-operator/internal/testenv/prereq"
	"github.com/widgetry/widget-operator/internal/testenv/testcerts"
	"github.com/widgetry/widget-operator/internal/webhook"
)

// renderChart renders the chart with helm3 for the API versions apis (see
// DiscoveredAPIVersions; nil: helm's defaults) and values, and parses it.
func renderChart(tb testing.TB, apis []string, values map[string]any) helmtemplate.Objects {
	tb.Helper()
	out, err := helmtemplate.Render(helmtemplate.Options{Helm: prereq.Tool(tb, "helm3"), Chart: filepath.Join(prereq.RepoRoot(tb), "charts", "widget-operator"),
		APIVersions: apis, Values: values})
	if err != nil {
		tb.Fatalf("widgetenv: %v", err)
	}
	objs, err := helmtemplate.Parse(out)
	if err != nil {
		tb.Fatalf("widgetenv: %v", err)
	}
	return objs
}

// ChartWebhooks are the chart's admission webhook configurations as helm renders them.
type ChartWebhooks struct {
	Mutating   *admissionregistrationv1.MutatingWebhookConfiguration
	Validating *admissionregistrationv1.ValidatingWebhookConfiguration
}

// RenderChartWebhooks renders the chart's MutatingWebhookConfiguration and
// ValidatingWebhookConfiguration for the API versions apis and values.
func RenderChartWebhooks(tb testing.TB, apis []string, values map[string]any) *ChartWebhooks {
	tb.Helper()
	objs := renderChart(tb, apis, values)
	w := &ChartWebhooks{Mutating: &admissionregistrationv1.MutatingWebhookConfiguration{}, Validating: &admissionregistrationv1.ValidatingWebhookConfiguration{}}
	m, v := objs.Kind("MutatingWebhookConfiguration"), objs.Kind("ValidatingWebhookConfiguration")
	if len(m) != 1 || len(v) != 1 {
		tb.Fatalf("widgetenv: the chart rendered %d MutatingWebhookConfigurations and %d ValidatingWebhookConfigurations, want one of each", len(m), len(v))
	}
	if err := helmtemplate.Into(m[0], w.Mutating); err != nil {
		tb.Fatal(err)
	}
	if err := helmtemplate.Into(v[0], w.Validating); err != nil {
		tb.Fatal(err)
	}
	return w
}

// WithoutMatchConditions is a copy of w with every webhook's matchConditions removed: what
// the chart shipped before it had any, so what a rollback to that chart installs.
func (w *ChartWebhooks) WithoutMatchConditions() *ChartWebhooks {
	out := &ChartWebhooks{Mutating: w.Mutating.DeepCopy(), Validating: w.Validating.DeepCopy()}
	for i := range out.Mutating.Webhooks {
		out.Mutating.Webhooks[i].MatchConditions = nil
	}
	for i := range out.Validating.Webhooks {
		out.Validating.Webhooks[i].MatchConditions = nil
	}
	return out
}

// Install creates the configurations on env's apiserver with every webhook's clientConfig a
// URL, base followed by the chart's path for it (base "https://127.0.0.1:PORT", from
// Unreachable or an AdmissionServer), trusting caPEM. cainjector's annotations are dropped:
// nothing injects here.
func (w *ChartWebhooks) Install(tb testing.TB, env *testenv.Env, base string, caPEM []byte) {
	tb.Helper()
	config := func(c admissionregistrationv1.WebhookClientConfig) admissionregistrationv1.WebhookClientConfig {
		if c.Service == nil {
			tb.Fatalf("widgetenv: a webhook of the chart calls no Service: %+v", c)
		}
		return admissionregistrationv1.WebhookClientConfig{URL: ptr.To(base + ptr.Deref(c.Service.Path, "")), CABundle: caPEM}
	}
	m, v := w.Mutating.DeepCopy(), w.Validating.DeepCopy()
	for i := range m.Webhooks {
		m.Webhooks[i].ClientConfig = config(m.Webhooks[i].ClientConfig)
	}
	for i := range v.Webhooks {
		v.Webhooks[i].ClientConfig = config(v.Webhooks[i].ClientConfig)
	}
	for _, o := range []client.Object{m, v} {
		o.SetAnnotations(nil)
		if err := env.Client.Create(context.Background(), o); err != nil {
			tb.Fatalf("widgetenv: create %T %s: %v", o, o.GetName(), err)
		}
	}
}

// Unreachable is a webhook base URL where nothing listens (a loopback port from
// testenv.FreePort: under the ephemeral range, so no connection's source port holds it either)
// and a CA that signed nothing: every pod of ours gone.
func Unreachable(tb testing.TB) (base string, caPEM []byte) {
	tb.Helper()
	return fmt.Sprintf("https://127.0.0.1:%d", testenv.FreePort(tb)), testcerts.NewCA(tb, "nobody").PEM
}

// AdmissionServer serves the real Widget admission handlers (webhook.Defaulter at
// webhook.MutatePath, webhook.Validator at webhook.ValidatePath) over TLS in the test process,
// counting the AdmissionReviews each answers.
type AdmissionServer struct {
	// URL is the server's base ("https://127.0.0.1:PORT"); CA signed its certificate.
	URL   string
	CA    *testcerts.CA
	calls map[string]*atomic.Int64
}

// ServeAdmissionHandlers starts an AdmissionServer; it stops when the test ends.
func ServeAdmissionHandlers(tb testing.TB) *AdmissionServer {
	tb.Helper()
	s := &AdmissionServer{calls: map[string]*atomic.Int64{}}
	mux := http.NewServeMux()
	for path, h := range map[string]admission.Handler{webhook.MutatePath: webhook.Defaulter{}, webhook.ValidatePath: webhook.Validator{}} {
		served := &crwebhook.Admission{Handler: h}
		n := &atomic.Int64{}
		s.calls[path] = n
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			n.Add(1)
			served.ServeHTTP(w, r)
		})
	}
	s.URL, s.CA = testcerts.Serve(tb, mux)
	return s
}

// Calls is how many AdmissionReviews the handler at path has answered so far.
func (s *AdmissionServer) Calls(path string) int64 { return s.calls[path].Load() }

// Reviews is how many AdmissionReviews both handlers have answered so far.
func (s *AdmissionServer) Reviews() int64 {
	return s.Calls(webhook.MutatePath) + s.Calls(webhook.ValidatePath)
}
