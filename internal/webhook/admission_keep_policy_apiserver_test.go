//go:build envtest

package webhook_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/widgetry/widget-operator/api/v1alpha1"
	"github.com/widgetry/widget-operator/internal/conversion"
	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/scheme"
	"github.com/widgetry/widget-operator/internal/testenv"
	"github.com/widgetry/widget-operator/internal/testenv/testcerts"
	"github.com/widgetry/widget-operator/internal/testenv/widgetenv"
	"github.com/widgetry/widget-operator/internal/webhook"
)

// keepCase is a stored v1alpha1 Widget and a v1alpha1 client's full PUT of it (client.Update
// of an object rebuilt from the client's own copy: image changed, timeoutSeconds and
// annotations as the client holds them).
type keepCase struct {
	name string
	// stored is the stored conversion-data annotation ("" for none); storedSeconds its
	// timeoutSeconds; storedOther its other annotations.
	stored        string
	storedSeconds int32
	storedOther   map[string]string
	// seconds is the request's timeoutSeconds, annotations its annotations (nil: none at
	// all, the map absent).
	seconds     int32
	annotations map[string]string
	// endpoints are the request's.
	endpoints []v1alpha1.Endpoint
	// want is what is stored afterwards (nil: no annotations); refused: the write fails.
	want    map[string]string
	refused string
	// canonical: the policy handles it alone; otherwise the webhook must.
	canonical bool
}

func data(value string) map[string]string { return map[string]string{conversion.DataAnnotation: value} }

var keepCases = []keepCase{
	// Canonical: the policy keeps these with no pod of ours.
	{name: "paused", stored: `{"paused":true}`, storedSeconds: 30, seconds: 30, want: data(`{"paused":true}`), canonical: true},
	{name: "paused-new-timeout", stored: `{"paused":true}`, storedSeconds: 30, seconds: 45, want: data(`{"paused":true}`), canonical: true},
	{name: "ms-paused", stored: `{"timeout":"1500ms","paused":true}`, storedSeconds: 2, seconds: 2, want: data(`{"timeout":"1500ms","paused":true}`), canonical: true},
	{name: "ms-paused-changed", stored: `{"timeout":"1500ms","paused":true}`, storedSeconds: 2, seconds: 5, want: data(`{"paused":true}`), canonical: true},
	{name: "90s", stored: `{"timeout":"90s"}`, storedSeconds: 90, seconds: 90, want: data(`{"timeout":"90s"}`), canonical: true},
	{name: "90s-changed", stored: `{"timeout":"90s"}`, storedSeconds: 90, seconds: 91, canonical: true},
	{name: "90s-lowered", stored: `{"timeout":"90s"}`, storedSeconds: 90, seconds: 89, canonical: true},
	{name: "1m0.5s", stored: `{"timeout":"1m0.5s"}`, storedSeconds: 61, seconds: 61, want: data(`{"timeout":"1m0.5s"}`), canonical: true},
	{name: "micro-sign", stored: `{"timeout":"1µs","paused":true}`, storedSeconds: 1, seconds: 1, want: data(`{"timeout":"1µs","paused":true}`), canonical: true},
	{name: "greek-mu", stored: `{"timeout":"1μs"}`, storedSeconds: 1, seconds: 1, want: data(`{"timeout":"1μs"}`), canonical: true},
	{name: "us", stored: `{"timeout":"1us"}`, storedSeconds: 1, seconds: 1, want: data(`{"timeout":"1us"}`), canonical: true},
	{name: "leading-dot", stored: `{"timeout":".5s"}`, storedSeconds: 1, seconds: 1, want: data(`{"timeout":".5s"}`), canonical: true},
	{name: "plus-sign", stored: `{"timeout":"+1.5s"}`, storedSeconds: 2, seconds: 2, want: data(`{"timeout":"+1.5s"}`), canonical: true},
	{name: "just-whole", stored: `{"timeout":"2.000000001s"}`, storedSeconds: 3, seconds: 3, want: data(`{"timeout":"2.000000001s"}`), canonical: true},
	{name: "exactly-whole-seconds", stored: `{"timeout":"2000ms"}`, storedSeconds: 2, seconds: 2, want: data(`{"timeout":"2000ms"}`), canonical: true},
	{name: "over-an-hour", stored: `{"timeout":"1h0m0.5s","paused":true}`, storedSeconds: 3601, seconds: 3601, want: data(`{"timeout":"1h0m0.5s","paused":true}`), canonical: true},
	{name: "60s", stored: `{"timeout":"60s"}`, storedSeconds: 60, seconds: 60, want: data(`{"timeout":"60s"}`), canonical: true},
	// Whole seconds as Go writes them are what timeoutSeconds holds already: nothing kept.
	{name: "canonical-seconds", stored: `{"timeout":"2s"}`, storedSeconds: 2, seconds: 2, canonical: true},
	{name: "canonical-minute", stored: `{"timeout":"1m0s","paused":true}`, storedSeconds: 60, seconds: 60, want: data(`{"paused":true}`), canonical: true},
	{name: "canonical-hour", stored: `{"timeout":"1h0m0s"}`, storedSeconds: 3600, seconds: 3600, canonical: true},
	// A stored exact timeout that no longer rounds to the stored seconds is stale.
	{name: "stale-stored", stored: `{"timeout":"1.5s"}`, storedSeconds: 5, seconds: 5, canonical: true},
	{name: "negative-stored", stored: `{"timeout":"-1.5s"}`, storedSeconds: 2, seconds: 2, canonical: true},
	{name: "empty-object-stored", stored: `{}`, storedSeconds: 10, seconds: 10, canonical: true},
	{name: "nothing", storedSeconds: 10, seconds: 10, canonical: true},
	// The request's own annotation is replaced by what the stored object implies.
	{name: "request-stale", stored: `{"paused":true}`, storedSeconds: 10, seconds: 10, annotations: data(`{"timeout":"9.5s"}`), want: data(`{"paused":true}`), canonical: true},
	{name: "request-forged", storedSeconds: 10, seconds: 10, annotations: data(`{"paused":true}`), canonical: true},
	{name: "request-forged-timeout", stored: `{"timeout":"1.5s"}`, storedSeconds: 2, seconds: 2, annotations: data(`{"timeout":"1.7s","paused":true}`), want: data(`{"timeout":"1.5s"}`), canonical: true},
	{name: "request-forged-others", storedSeconds: 10, seconds: 10, annotations: map[string]string{conversion.DataAnnotation: `{"paused":true}`, "team": "a"}, want: map[string]string{"team": "a"}, canonical: true},
	{name: "request-right", stored: `{"paused":true}`, storedSeconds: 10, seconds: 10, annotations: data(`{"paused":true}`), want: data(`{"paused":true}`), canonical: true},
	// {} parses to nothing to keep, which is what is due: the webhook leaves it.
	{name: "request-empty-object", storedSeconds: 10, seconds: 10, annotations: data(`{}`), want: data(`{}`), canonical: true},
	{name: "others-present", stored: `{"paused":true}`, storedSeconds: 10, storedOther: map[string]string{"team": "a"}, seconds: 10,
		annotations: map[string]string{"team": "b"}, want: map[string]string{"team": "b", conversion.DataAnnotation: `{"paused":true}`}, canonical: true},
	{name: "others-only", storedSeconds: 10, storedOther: map[string]string{"team": "a"}, seconds: 10, annotations: map[string]string{"team": "b"}, want: map[string]string{"team": "b"}, canonical: true},

	// Not canonical: the policy's regular expressions cannot read these; the webhook must.
	{name: "stored-spaced", stored: `{"paused": true}`, storedSeconds: 30, seconds: 30, want: data(`{"paused":true}`)},
	{name: "stored-key-order", stored: `{"paused":true,"timeout":"1.5s"}`, storedSeconds: 2, seconds: 2, want: data(`{"timeout":"1.5s","paused":true}`)},
	{name: "stored-escape", stored: `{"timeout":"1.5\u0073"}`, storedSeconds: 2, seconds: 2, want: data(`{"timeout":"1.5s"}`)},
	{name: "stored-long-number", stored: `{"timeout":"000000001.5s"}`, storedSeconds: 2, seconds: 2, want: data(`{"timeout":"000000001.5s"}`)},
	{name: "stored-unknown-key", stored: `{"paused":true,"x":1}`, storedSeconds: 2, seconds: 2, want: data(`{"paused":true}`)},
	// An explicit paused: false is kept as the v1 client wrote it (v1's spec.paused is a
	// pointer), by the policy as by the webhook.
	{name: "stored-paused-false", stored: `{"timeout":"1.5s","paused":false}`, storedSeconds: 2, seconds: 2, want: data(`{"timeout":"1.5s","paused":false}`), canonical: true},
	{name: "paused-false", stored: `{"paused":false}`, storedSeconds: 30, seconds: 45, want: data(`{"paused":false}`), canonical: true},
	// A stored value conversion cannot read: admitted unchanged (with a warning), so that a
	// v1alpha1 write can repair it.
	{name: "stored-malformed", stored: `{"paused":tru`, storedSeconds: 2, seconds: 2},
	{name: "request-spaced-right", stored: `{"paused":true}`, storedSeconds: 10, seconds: 10, annotations: data(`{"paused": true}`), want: data(`{"paused": true}`)},
	{name: "request-spaced-wrong", stored: `{"paused":true}`, storedSeconds: 10, seconds: 10, annotations: data(`{"paused": false}`), want: data(`{"paused":true}`)},
	{name: "request-malformed", storedSeconds: 10, seconds: 10, annotations: data(`{`), refused: "is not valid conversion data"},
	// Refused either way, by different checks: the Defaulter's conversion (webhook route) or
	// the CRD's listType=map (policy route, where the webhook is not called).
	{name: "duplicate-endpoints", stored: `{"paused":true}`, storedSeconds: 10, seconds: 10, endpoints: []v1alpha1.Endpoint{{Name: "http", Port: 80}, {Name: "http", Port: 81}},
		refused: "uplicate", canonical: true},
}

// keepOutcome is what a case left: the stored annotations and timeoutSeconds, or the refusal.
type keepOutcome struct {
	annotations map[string]string
	seconds     int32
	err         string
}

// TestKeepingRoutesAgree runs every keepCase on two apiservers: one without
// MutatingAdmissionPolicy, for which the chart renders the mutating webhook alone, and one
// that serves it, for which the chart renders the policy, and the webhook only for what the
// policy cannot read. Both renders take the cluster's API versions from discovery, as helm
// install does. What each write stores is the same on both, and as the case wants. On the
// policy's cluster, every canonical case goes through with nothing listening for the webhook
// (the policy alone keeps paused and the exact timeout), and every other case is refused
// until the webhook answers, then stores what the webhook route stores while the canonical
// ones still never call it. With the policy's binding deleted, the webhook, as configured for
// the policy route, keeps everything itself.
func TestKeepingRoutesAgree(t *testing.T) {
	reviews := &atomic.Int64{}
	mux := http.NewServeMux()
	served := &crwebhook.Admission{Handler: webhook.Defaulter{}}
	mux.HandleFunc(webhook.MutatePath, func(w http.ResponseWriter, r *http.Request) {
		reviews.Add(1)
		served.ServeHTTP(w, r)
	})
	url, ca := testcerts.Serve(t, mux)

	webhookRoute := map[string]keepOutcome{}
	t.Run("webhook route, no MutatingAdmissionPolicy served", func(t *testing.T) {
		env, k := startKeeping(t, widgetenv.WithoutMutatingAdmissionPolicy)
		if k.Policy != nil || slices.ContainsFunc(k.Webhook.Webhooks[0].MatchConditions, isPolicyCondition) {
			t.Fatalf("a cluster without MutatingAdmissionPolicy got the policy route: policy %v, webhook conditions %v", k.Policy != nil, k.Webhook.Webhooks[0].MatchConditions)
		}
		k.PointWebhook(t, url, ca.PEM)
		for _, tc := range keepCases {
			webhookRoute[tc.name] = runKeepCase(t, env, tc)
			checkKeepCase(t, tc, webhookRoute[tc.name])
		}
	})

	t.Run("policy route", func(t *testing.T) {
		env, k := startKeeping(t, nil)
		if k.Policy == nil || !slices.ContainsFunc(k.Webhook.Webhooks[0].MatchConditions, isPolicyCondition) {
			t.Fatalf("a cluster serving MutatingAdmissionPolicy got the webhook route: policy %v, webhook conditions %v", k.Policy != nil, k.Webhook.Webhooks[0].MatchConditions)
		}
		// Nothing listens for the webhook yet.
		for _, tc := range keepCases {
			got := runKeepCase(t, env, tc)
			if !tc.canonical {
				if !strings.Contains(got.err, `failed calling webhook "mutate.widgets.widgetry.io"`) {
					t.Errorf("%s: with the webhook unreachable, got %+v; want a refusal by the unreachable webhook (the policy must not handle it)", tc.name, got)
				}
				continue
			}
			checkKeepCase(t, tc, got)
			compareRoutes(t, tc.name, got, webhookRoute)
		}
		// Now the webhook answers: the other cases go through it, the canonical ones still
		// never call it.
		k.PointWebhook(t, url, ca.PEM)
		for _, tc := range keepCases {
			before := reviews.Load()
			got := runKeepCase(t, env, tc)
			calls := reviews.Load() - before
			switch {
			case tc.canonical && calls != 0:
				t.Errorf("%s: the policy handles it, yet the webhook was called %d times", tc.name, calls)
			case !tc.canonical && calls == 0:
				t.Errorf("%s: not canonical, yet the webhook was not called", tc.name)
			}
			checkKeepCase(t, tc, got)
			compareRoutes(t, tc.name, got, webhookRoute)
		}
		// Without the policy in effect (not loaded yet right after an upgrade to it, or
		// deleted), the webhook's condition sees an annotation that is not yet what must be
		// stored and calls it: nothing is lost in between.
		if err := env.Client.Delete(context.Background(), k.Binding); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 30*time.Second, "the policy's binding gone from the apiserver", func() error {
			before := reviews.Load()
			runKeepCase(t, env, keepCases[0])
			if reviews.Load() == before {
				return fmt.Errorf("the webhook was not called: the policy still kept %s", keepCases[0].name)
			}
			return nil
		})
		for _, tc := range keepCases {
			got := runKeepCase(t, env, tc)
			checkKeepCase(t, tc, got)
			compareRoutes(t, tc.name, got, webhookRoute)
		}
	})
}

func isPolicyCondition(c admissionregistrationv1.MatchCondition) bool {
	return c.Name == "not-kept-by-policy"
}

// startKeeping starts an apiserver with flags, the Widget CRD at initial (v1alpha1 alone: no
// conversion anywhere) and what the chart renders for its API versions.
func startKeeping(t *testing.T, flags map[string]string) (*testenv.Env, *widgetenv.Keeping) {
	t.Helper()
	env := testenv.Start(t, testenv.Options{Scheme: scheme.New(), APIServerFlags: flags})
	c := crd.Widget()
	if err := crd.ApplyStageFlags(c, crd.StageInitial); err != nil {
		t.Fatal(err)
	}
	env.InstallCRDs(t, c)
	if err := env.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "keep"}}); err != nil {
		t.Fatal(err)
	}
	return env, widgetenv.InstallKeeping(t, env, "keep", widgetenv.DiscoveredAPIVersions(t, env), nil)
}

// runKeepCase stores the case's Widget through v1alpha1 (a CREATE, which neither route acts
// on), PUTs the client's rebuilt copy and reads back what was stored. Each run uses a fresh
// name, so a case can run twice on one apiserver.
func runKeepCase(t *testing.T, env *testenv.Env, tc keepCase) keepOutcome {
	t.Helper()
	ctx := context.Background()
	stored := &v1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "keep", GenerateName: tc.name + "-"},
		Spec: v1alpha1.WidgetSpec{Image: "srv:1", Replicas: ptr.To[int32](1), TimeoutSeconds: ptr.To(tc.storedSeconds)}}
	if tc.stored != "" || tc.storedOther != nil {
		stored.Annotations = map[string]string{}
		for k, v := range tc.storedOther {
			stored.Annotations[k] = v
		}
		if tc.stored != "" {
			stored.Annotations[conversion.DataAnnotation] = tc.stored
		}
	}
	if err := env.Client.Create(ctx, stored); err != nil {
		t.Fatalf("%s: create: %v", tc.name, err)
	}
	// What the old client holds: its own copy, not the stored object.
	put := &v1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "keep", Name: stored.Name, ResourceVersion: stored.ResourceVersion, Annotations: tc.annotations},
		Spec: v1alpha1.WidgetSpec{Image: "srv:2", Replicas: ptr.To[int32](1), TimeoutSeconds: ptr.To(tc.seconds), Endpoints: tc.endpoints}}
	if err := env.Client.Update(ctx, put); err != nil {
		return keepOutcome{err: err.Error()}
	}
	got := &v1alpha1.Widget{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(stored), got); err != nil {
		t.Fatalf("%s: %v", tc.name, err)
	}
	return keepOutcome{annotations: got.Annotations, seconds: ptr.Deref(got.Spec.TimeoutSeconds, 0)}
}

func checkKeepCase(t *testing.T, tc keepCase, got keepOutcome) {
	t.Helper()
	if got.err != "" {
		t.Logf("%s: refused: %s", tc.name, got.err)
	}
	switch {
	case tc.refused != "":
		if !strings.Contains(got.err, tc.refused) {
			t.Errorf("%s: got %+v, want a refusal %q", tc.name, got, tc.refused)
		}
	case got.err != "":
		t.Errorf("%s: refused: %s", tc.name, got.err)
	case !equalAnnotations(got.annotations, tc.want) || got.seconds != tc.seconds:
		t.Errorf("%s: stored annotations %q timeoutSeconds %d; want %q, %d", tc.name, got.annotations, got.seconds, tc.want, tc.seconds)
	}
}

// compareRoutes: the policy route stored what the webhook route did.
func compareRoutes(t *testing.T, name string, got keepOutcome, webhookRoute map[string]keepOutcome) {
	t.Helper()
	want, ok := webhookRoute[name]
	if !ok {
		t.Errorf("%s: the webhook route did not run", name)
		return
	}
	if !equalAnnotations(got.annotations, want.annotations) || got.seconds != want.seconds || (got.err == "") != (want.err == "") {
		t.Errorf("%s: the policy route stored %+v, the webhook route %+v", name, got, want)
	}
}

// equalAnnotations compares the annotations; nil and empty are both none (the apiserver does
// not keep an empty map).
func equalAnnotations(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
