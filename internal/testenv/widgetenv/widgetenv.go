// Package widgetenv starts envtest with the Widget CRD converting through the real
// conversion webhook, and reads what etcd holds, for the integration tests and benchmarks of
// every package that needs Widgets stored in a real apiserver (migration, stage engine).
package widgetenv

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/widgetry/widget-operator/api/v1"
	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/scheme"
	"github.com/widgetry/widget-operator/internal/testenv"
	"github.com/widgetry/widget-operator/internal/testenv/testcerts"
	"github.com/widgetry/widget-operator/internal/webhook"
)

// StartWithConversionWebhook boots envtest (with opts: controller manager, flags...) and
// installs the Widget CRD, both versions served, storage the given version, converting
// through a webhook.ConversionHandler served over TLS with a CA made by the test.
// opts.CRDs and opts.Scheme are set by this function.
func StartWithConversionWebhook(tb testing.TB, storage string, opts testenv.Options) *testenv.Env {
	tb.Helper()
	return StartWithConversionHandler(tb, storage, &webhook.ConversionHandler{}, opts)
}

// StartWithConversionHandler is StartWithConversionWebhook with the handler h (say, one with
// metrics).
func StartWithConversionHandler(tb testing.TB, storage string, h *webhook.ConversionHandler, opts testenv.Options) *testenv.Env {
	tb.Helper()
	opts.CRDs = []*apiextensionsv1.CustomResourceDefinition{widgetCRDServedBy(tb, storage, h)}
	opts.Scheme = scheme.New()
	return testenv.Start(tb, opts)
}

// WidgetCRD is the Widget CRD with storage version storage and the conversion webhook
// served by a new test server.
func WidgetCRD(tb testing.TB, storage string) *apiextensionsv1.CustomResourceDefinition {
	tb.Helper()
	return widgetCRDServedBy(tb, storage, &webhook.ConversionHandler{})
}

func widgetCRDServedBy(tb testing.TB, storage string, h *webhook.ConversionHandler) *apiextensionsv1.CustomResourceDefinition {
	tb.Helper()
	url, ca := testcerts.Serve(tb, h)
	c := crd.WithWebhookConversion(crd.Widget(), apiextensionsv1.WebhookClientConfig{URL: ptr.To(url + "/convert"), CABundle: ca.PEM})
	if err := crd.SetStorageVersion(c, storage); err != nil {
		tb.Fatal(err)
	}
	return c
}

// SetStorageVersion makes version the Widget CRD's storage version and returns once the
// apiserver writes new objects in it (it rebuilds the CRD's storage asynchronously after
// the update): a probe Widget in namespace probeNamespace is written until etcd holds it
// in the new version.
func SetStorageVersion(tb testing.TB, env *testenv.Env, version, probeNamespace string) {
	tb.Helper()
	ctx := context.Background()
	c := &apiextensionsv1.CustomResourceDefinition{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: crd.WidgetName}, c); err != nil {
		tb.Fatalf("widgetenv: read the Widget CRD: %v", err)
	}
	if err := crd.SetStorageVersion(c, version); err != nil {
		tb.Fatal(err)
	}
	if err := env.Client.Update(ctx, c); err != nil {
		tb.Fatalf("widgetenv: set the storage version to %s: %v", version, err)
	}
	WaitForStorageVersion(tb, env, version, probeNamespace)
}

// WaitForStorageVersion writes a probe Widget until etcd holds it in version, then deletes it.
func WaitForStorageVersion(tb testing.TB, env *testenv.Env, version, probeNamespace string) {
	tb.Helper()
	ctx := context.Background()
	etcd := NewEtcd(env)
	probe := &v1.Widget{}
	probe.Namespace, probe.Name = probeNamespace, "storage-probe"
	probe.Spec.Image = "probe"
	deadline := time.Now().Add(30 * time.Second)
	for {
		_ = env.Client.Delete(ctx, probe.DeepCopy())
		p := probe.DeepCopy()
		if err := env.Client.Create(ctx, p); err == nil {
			got, err := etcd.Get(ctx, WidgetKey(probeNamespace, p.Name))
			if err == nil && APIVersion(got) == v1.GroupVersion.Group+"/"+version {
				_ = env.Client.Delete(ctx, p)
				return
			}
		}
		if time.Now().After(deadline) {
			tb.Fatalf("widgetenv: the apiserver does not write Widgets in %s 30s after the storage flip", version)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// WidgetKey is the etcd key of a Widget (the apiserver's default /registry prefix).
func WidgetKey(namespace, name string) string {
	return WidgetPrefix + namespace + "/" + name
}

// WidgetPrefix is the etcd key prefix of all Widgets.
const WidgetPrefix = "/registry/widgetry.io/widgets/"

// APIVersion returns the apiVersion a stored object names ("" if it is not JSON): the
// apiserver stores custom resources as JSON in their storage version.
func APIVersion(stored []byte) string {
	var tm struct {
		APIVersion string `json:"apiVersion"`
	}
	if json.Unmarshal(stored, &tm) != nil {
		return ""
	}
	return tm.APIVersion
}

// Etcd reads and writes envtest's etcd through etcd's own JSON API (the v3 gRPC gateway on
// the client URL), which needs no client library and so no gRPC in the test binaries.
type Etcd struct {
	url  string
	http *http.Client
}

// NewEtcd connects to env's etcd.
func NewEtcd(env *testenv.Env) *Etcd {
	return &Etcd{url: strings.TrimSuffix(env.Environment.ControlPlane.Etcd.URL.String(), "/"), http: &http.Client{Timeout: time.Minute}}
}

func (e *Etcd) call(ctx context.Context, path string, req, resp any) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	r.Header.Set("Content-Type", "application/json")
	res, err := e.http.Do(r)
	if err != nil {
		return fmt.Errorf("etcd %s: %w", path, err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		return fmt.Errorf("etcd %s: %w", path, err)
	}
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("etcd %s: %s: %s", path, res.Status, data)
	}
	return json.Unmarshal(data, resp)
}

type kv struct {
	Key   []byte `json:"key"`
	Value []byte `json:"value"`
}

// Get returns the value of one key; an error if it does not exist.
func (e *Etcd) Get(ctx context.Context, key string) ([]byte, error) {
	var resp struct{ Kvs []kv }
	if err := e.call(ctx, "/v3/kv/range", map[string]any{"key": []byte(key)}, &resp); err != nil {
		return nil, err
	}
	if len(resp.Kvs) == 0 {
		return nil, fmt.Errorf("etcd: no key %s", key)
	}
	return resp.Kvs[0].Value, nil
}

// List returns every key under prefix with its value, paging through etcd.
func (e *Etcd) List(ctx context.Context, prefix string) (map[string][]byte, error) {
	out := map[string][]byte{}
	start, end := []byte(prefix), prefixEnd(prefix)
	for {
		var resp struct {
			Kvs  []kv
			More bool
		}
		if err := e.call(ctx, "/v3/kv/range", map[string]any{"key": start, "range_end": end, "limit": 1000}, &resp); err != nil {
			return nil, err
		}
		for _, kv := range resp.Kvs {
			out[string(kv.Key)] = kv.Value
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return out, nil
		}
		start = append([]byte(string(resp.Kvs[len(resp.Kvs)-1].Key)), 0)
	}
}

// Put writes one key, bypassing the apiserver (whose watch cache sees the change).
func (e *Etcd) Put(ctx context.Context, key string, value []byte) error {
	var resp map[string]any
	return e.call(ctx, "/v3/kv/put", map[string]any{"key": []byte(key), "value": value}, &resp)
}

func prefixEnd(prefix string) []byte {
	end := []byte(prefix)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return []byte{0}
}

// StoredAPIVersions maps every stored Widget ("namespace/name") to the apiVersion its
// stored JSON names.
func StoredAPIVersions(tb testing.TB, env *testenv.Env) map[string]string {
	tb.Helper()
	kvs, err := NewEtcd(env).List(context.Background(), WidgetPrefix)
	if err != nil {
		tb.Fatalf("widgetenv: read Widgets from etcd: %v", err)
	}
	out := make(map[string]string, len(kvs))
	for k, v := range kvs {
		out[strings.TrimPrefix(k, WidgetPrefix)] = APIVersion(v)
	}
	return out
}

// ServeAdmission serves the Widget admission webhooks (webhook.Defaulter at
// webhook.MutatePath, webhook.Validator at webhook.ValidatePath) over TLS in the test process
// and registers them with env's apiserver as the chart does, then waits until the apiserver
// calls them. It returns how many AdmissionReviews they have answered so far, so that a test
// can tell which writes admission saw (those through the status subresource it does not).
func ServeAdmission(tb testing.TB, env *testenv.Env, probeNamespace string) (reviews func() int64) {
	tb.Helper()
	s := ServeAdmissionHandlers(tb)
	installWebhookConfigurations(tb, env.Client, func(path string) string { return s.URL + path }, s.CA.PEM)

	// The apiserver picks webhook configurations up from an informer: a dry-run create is
	// admitted, by the webhooks too, once it has.
	probe := &v1.Widget{}
	probe.Namespace, probe.Name, probe.Spec.Image = probeNamespace, "admission-probe", "probe"
	deadline := time.Now().Add(30 * time.Second)
	for s.Reviews() == 0 {
		if err := env.Client.Create(context.Background(), probe.DeepCopy(), client.DryRunAll); err != nil {
			tb.Fatalf("widgetenv: dry-run create of an admission probe: %v", err)
		}
		if time.Now().After(deadline) {
			tb.Fatal("widgetenv: the apiserver does not call the admission webhooks 30s after their configurations were created")
		}
		time.Sleep(100 * time.Millisecond)
	}
	return s.Reviews
}
