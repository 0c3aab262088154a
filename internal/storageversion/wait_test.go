package storageversion

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/endpoints/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/widgetry/widget-operator/internal/scheme"
)

var (
	oldHash = discovery.StorageVersionHash("example.com", "v1alpha1", "Thing")
	newHash = discovery.StorageVersionHash("example.com", "v1", "Thing")
)

// thingCRD stores v1; v1alpha1 is served too.
func thingCRD() *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "things.example.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "example.com", Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "things", Kind: "Thing"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1alpha1", Served: true}, {Name: "v1", Served: true, Storage: true}},
		},
	}
}

// fakeInstance serves the discovery document of example.com/v1 with a settable hash, over
// TLS with httptest's certificate (for 127.0.0.1 and example.com).
type fakeInstance struct {
	srv    *httptest.Server
	hash   atomic.Pointer[string]
	status atomic.Int32
}

func newFakeInstance(t *testing.T, hash string) *fakeInstance {
	f := &fakeInstance{}
	f.hash.Store(&hash)
	f.status.Store(http.StatusOK)
	f.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/apis/example.com/v1" || f.status.Load() != http.StatusOK {
			w.WriteHeader(int(f.status.Load()))
			return
		}
		_ = json.NewEncoder(w).Encode(metav1.APIResourceList{GroupVersion: "example.com/v1", APIResources: []metav1.APIResource{
			{Name: "things", Kind: "Thing", StorageVersionHash: *f.hash.Load()}}})
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeInstance) addr() string { return strings.TrimPrefix(f.srv.URL, "https://") }

// restConfig trusts httptest's certificate.
func restConfig(f *fakeInstance) *rest.Config {
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.srv.Certificate().Raw})
	return &rest.Config{Host: f.srv.URL, TLSClientConfig: rest.TLSClientConfig{CAData: ca}}
}

func fakeClient(objs ...client.Object) client.Client {
	return fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(append(objs, thingCRD())...).Build()
}

var quick = Options{Timeout: time.Second, Interval: 50 * time.Millisecond, RequestTimeout: 500 * time.Millisecond, Settle: 150 * time.Millisecond}

func TestWait(t *testing.T) {
	ctx := context.Background()
	t.Run("every instance switched", func(t *testing.T) {
		a, b := newFakeInstance(t, newHash), newFakeInstance(t, newHash)
		opts := quick
		opts.Instances = []string{a.addr(), b.addr()}
		res, err := Wait(ctx, fakeClient(), restConfig(a), "things.example.com", opts)
		if err != nil {
			t.Fatal(err)
		}
		if res.StorageVersion != "v1" || res.Hash != newHash || len(res.Instances) != 2 || !res.Instances[0].Switched || !res.Instances[1].Switched || res.FromEndpoints {
			t.Errorf("result %+v", res)
		}
	})

	t.Run("instances from the endpoints of default/kubernetes", func(t *testing.T) {
		a := newFakeInstance(t, newHash)
		host, p, _ := net.SplitHostPort(a.addr())
		pn, _ := strconv.ParseInt(p, 10, 32)
		slice := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "kubernetes", Labels: map[string]string{discoveryv1.LabelServiceName: "kubernetes"}},
			Ports:      []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To(int32(pn))}}, Endpoints: []discoveryv1.Endpoint{{Addresses: []string{host}}},
		}
		res, err := Wait(ctx, fakeClient(slice), restConfig(a), "things.example.com", quick)
		if err != nil {
			t.Fatal(err)
		}
		if !res.FromEndpoints || len(res.Instances) != 1 || res.Instances[0].Address != a.addr() {
			t.Errorf("result %+v", res)
		}
	})

	t.Run("no endpoints", func(t *testing.T) {
		a := newFakeInstance(t, newHash)
		_, err := Wait(ctx, fakeClient(), restConfig(a), "things.example.com", quick)
		if err == nil || !strings.Contains(err.Error(), "lists no kube-apiserver") {
			t.Errorf("got %v", err)
		}
	})

	lagging := func(t *testing.T, b *fakeInstance, opts Options, want string) {
		t.Helper()
		a := newFakeInstance(t, newHash)
		opts.Instances = []string{a.addr(), b.addr()}
		start := time.Now()
		res, err := Wait(ctx, fakeClient(), restConfig(a), "things.example.com", opts)
		var lag *LagError
		if !errors.As(err, &lag) {
			t.Fatalf("want a *LagError, got %v", err)
		}
		if elapsed := time.Since(start); elapsed < opts.Timeout {
			t.Errorf("returned after %s, before the timeout %s", elapsed, opts.Timeout)
		}
		if l := lag.Lagging(); len(l) != 1 || l[0].Address != b.addr() || res.Instances[0].Address > res.Instances[1].Address {
			t.Errorf("lagging %+v, instances %+v", l, res.Instances)
		}
		for _, w := range []string{b.addr(), want, "1 of 2 kube-apiserver instances do not write CRD things.example.com as v1", "1 switched"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("error %q does not say %q", err, w)
			}
		}
		if strings.Contains(err.Error(), a.addr()) {
			t.Errorf("error %q names the instance that switched", err)
		}
	}
	t.Run("an instance still writes the old version", func(t *testing.T) {
		lagging(t, newFakeInstance(t, oldHash), quick, "still writes v1alpha1 (storageVersionHash "+oldHash+", want "+newHash+")")
	})
	t.Run("an instance does not serve the version yet", func(t *testing.T) {
		b := newFakeInstance(t, newHash)
		b.status.Store(http.StatusNotFound)
		lagging(t, b, quick, "does not serve /apis/example.com/v1 yet")
	})
	t.Run("an instance does not answer", func(t *testing.T) {
		b := newFakeInstance(t, newHash)
		b.srv.Close()
		lagging(t, b, quick, "no answer")
	})
	t.Run("an instance's certificate is not for the server name", func(t *testing.T) {
		opts := quick
		opts.ServerName = "kubernetes.default.svc"
		a := newFakeInstance(t, newHash)
		opts.Instances = []string{a.addr()}
		_, err := Wait(ctx, fakeClient(), restConfig(a), "things.example.com", opts)
		if err == nil || !strings.Contains(err.Error(), "kubernetes.default.svc") {
			t.Errorf("got %v, want a certificate error for kubernetes.default.svc", err)
		}
		opts.ServerName = "example.com" // in httptest's certificate
		if _, err := Wait(ctx, fakeClient(), restConfig(a), "things.example.com", opts); err != nil {
			t.Error(err)
		}
	})

	t.Run("returns once the lagging instance switches", func(t *testing.T) {
		a, b := newFakeInstance(t, newHash), newFakeInstance(t, oldHash)
		opts := quick
		opts.Timeout, opts.Instances = time.Minute, []string{a.addr(), b.addr()}
		time.AfterFunc(300*time.Millisecond, func() { b.hash.Store(&newHash) })
		start := time.Now()
		if _, err := Wait(ctx, fakeClient(), restConfig(a), "things.example.com", opts); err != nil {
			t.Fatal(err)
		}
		if elapsed := time.Since(start); elapsed < 300*time.Millisecond || elapsed > 10*time.Second {
			t.Errorf("returned after %s", elapsed)
		}
	})

	// The hash must hold for Settle: an instance that shows it, drops back and shows it again
	// is waited for from its last switch. Without the settle the wait returns at once.
	t.Run("a switch counts once it has held for Settle", func(t *testing.T) {
		a := newFakeInstance(t, newHash)
		opts := quick
		opts.Timeout, opts.Settle, opts.Instances = time.Minute, 400*time.Millisecond, []string{a.addr()}
		c := fakeClient()
		time.AfterFunc(150*time.Millisecond, func() { a.hash.Store(&oldHash) })
		time.AfterFunc(450*time.Millisecond, func() { a.hash.Store(&newHash) })
		start := time.Now()
		res, err := Wait(ctx, c, restConfig(a), "things.example.com", opts)
		if err != nil {
			t.Fatal(err)
		}
		if elapsed, least := time.Since(start), 450*time.Millisecond+opts.Settle; elapsed < least {
			t.Errorf("returned after %s, before the hash held for %s since its last switch (%s)", elapsed, opts.Settle, least)
		}
		if !res.Instances[0].Switched {
			t.Errorf("result %+v", res)
		}
	})
	t.Run("an instance that has not held the hash for Settle lags", func(t *testing.T) {
		a := newFakeInstance(t, newHash)
		opts := quick
		opts.Settle, opts.Instances = time.Hour, []string{a.addr()}
		_, err := Wait(ctx, fakeClient(), restConfig(a), "things.example.com", opts)
		var lag *LagError
		if !errors.As(err, &lag) || !strings.Contains(err.Error(), "reports v1 for ") || !strings.Contains(err.Error(), "counts as switched once it has for 1h0m0s") {
			t.Errorf("got %v, want a *LagError saying how long the instance has reported v1", err)
		}
	})

	t.Run("cancelled", func(t *testing.T) {
		a := newFakeInstance(t, oldHash)
		opts := quick
		opts.Timeout, opts.Instances = time.Minute, []string{a.addr()}
		ctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		_, err := Wait(ctx, fakeClient(), restConfig(a), "things.example.com", opts)
		var lag *LagError
		if !errors.Is(err, context.DeadlineExceeded) || errors.As(err, &lag) {
			t.Errorf("got %v, want the context's error", err)
		}
	})

	for _, tc := range []struct {
		name, crd, version, want string
	}{
		{"a missing CRD", "nothing.example.com", "", "CRD nothing.example.com does not exist"},
		{"another storage version than expected", "things.example.com", "v1alpha1", "CRD things.example.com stores v1, not v1alpha1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newFakeInstance(t, newHash)
			opts := quick
			opts.Version, opts.Instances = tc.version, []string{a.addr()}
			_, err := Wait(ctx, fakeClient(), restConfig(a), tc.crd, opts)
			if !errors.Is(err, ErrPrecondition) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want ErrPrecondition saying %q", err, tc.want)
			}
		})
	}
}

func TestStorageVersionHashIsUpstreams(t *testing.T) {
	for _, gvk := range [][3]string{{"widgetry.io", "v1", "Widget"}, {"widgetry.io", "v1alpha1", "Widget"}, {"", "v1", "Pod"}, {"example.com", "v2beta3", "Thing"}} {
		if got, want := storageVersionHash(gvk[0], gvk[1], gvk[2]), discovery.StorageVersionHash(gvk[0], gvk[1], gvk[2]); got != want {
			t.Errorf("%v: %s, upstream %s", gvk, got, want)
		}
	}
}
