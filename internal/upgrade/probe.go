package upgrade

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path"
	"reflect"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/client-go/rest"
)

// ProbeOptions tune the conversion probe.
type ProbeOptions struct {
	// URL overrides where the probe connects (the chart's hooks name the Service, which they
	// reach from inside the cluster); the certificate is verified against the CRD's caBundle,
	// for the Service's DNS name.
	URL string
	// APIServer, when set and URL is not, sends the probe through the apiserver's service
	// proxy (POST .../services/https:NAME:PORT/proxy/PATH) with these credentials, so that
	// on call needs neither cluster DNS nor a port-forward, only a kubeconfig allowed to
	// create services/proxy. The apiserver's proxy does not verify the webhook's certificate;
	// the replicas themselves are not Ready while their certificate does not verify against
	// the caBundles (the certificate-trust readiness check), and the dry-run checks go through
	// the apiserver's own webhook client.
	APIServer *rest.Config
	// Timeout bounds each request (default 10s).
	Timeout time.Duration
}

// ProbeConversion sends the CRD's conversion webhook ConversionReviews of probe objects, over
// TLS verified with the caBundle the CRD carries (what the apiserver will trust), and checks
// the answers obey the protocol and the round trips lose nothing: an Old object to New and
// back, and a New object carrying fields only New can express to Old and back. Before
// add-version the apiserver cannot do this: New is not served yet.
func ProbeConversion(ctx context.Context, live *apiextensionsv1.CustomResourceDefinition, cfg Config, opts ProbeOptions) error {
	conv := live.Spec.Conversion
	if conv == nil || conv.Strategy != apiextensionsv1.WebhookConverter || conv.Webhook == nil || conv.Webhook.ClientConfig == nil {
		return fmt.Errorf("CRD %s has no conversion webhook (strategy %v); install the chart, which configures it from the first install", live.Name, strategyOf(live))
	}
	cc := conv.Webhook.ClientConfig
	if len(cc.CABundle) == 0 {
		return fmt.Errorf("CRD %s has an empty caBundle: cainjector has not injected the CA yet; check the Certificate is Ready and cainjector runs (runbooks/procedures/certificate-rotation.md)", live.Name)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(cc.CABundle) {
		return fmt.Errorf("CRD %s caBundle holds no PEM certificate", live.Name)
	}
	target, serverName, err := webhookTarget(cc)
	if err != nil {
		return err
	}
	if opts.Timeout == 0 {
		opts.Timeout = 10 * time.Second
	}
	if opts.URL == "" && opts.APIServer != nil && cc.Service != nil {
		httpClient, proxyURL, err := serviceProxy(opts.APIServer, cc.Service, opts.Timeout)
		if err != nil {
			return err
		}
		defer httpClient.CloseIdleConnections()
		return probeRoundTrips(ctx, httpClient, proxyURL, live.Spec.Group, live.Spec.Names.Kind, cfg)
	}
	if opts.URL != "" {
		target = opts.URL
	}
	httpClient := &http.Client{Timeout: opts.Timeout, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: serverName, MinVersion: tls.VersionTLS12}}}
	defer httpClient.CloseIdleConnections()
	return probeRoundTrips(ctx, httpClient, target, live.Spec.Group, live.Spec.Names.Kind, cfg)
}

// ProbeBuildConversion runs the same round trips through cfg.BuildConverter, the conversion
// handler compiled into this binary. The chart's hooks run the image they are about to roll
// out, so at a same-stage upgrade or rollback (a new build, the same CRD) this checks the new
// build's conversion before any of its pods takes traffic.
func ProbeBuildConversion(ctx context.Context, cfg Config, group, kind string) error {
	if cfg.BuildConverter == nil {
		return nil
	}
	httpClient := &http.Client{Transport: handlerTransport{cfg.BuildConverter}}
	return probeRoundTrips(ctx, httpClient, "http://this-build/convert", group, kind, cfg)
}

// handlerTransport answers requests with an in-process handler.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	t.h.ServeHTTP(rec, req)
	return rec.Result(), nil
}

// probeRoundTrips converts ProbeObject (Old) to New and back, and NewProbeObject (New) to Old
// and back, and compares each result with what was sent.
func probeRoundTrips(ctx context.Context, httpClient *http.Client, target, group, kind string, cfg Config) error {
	probes := []struct {
		from, to string
		object   func() map[string]any
	}{{cfg.Old, cfg.New, cfg.ProbeObject}, {cfg.New, cfg.Old, cfg.NewProbeObject}}
	for _, p := range probes {
		if p.object == nil {
			continue
		}
		probe := p.object()
		probe["apiVersion"], probe["kind"] = group+"/"+p.from, kind
		probe["metadata"] = map[string]any{"name": "widgetctl-probe", "namespace": "default", "uid": "00000000-0000-4000-8000-000000000000",
			"labels": map[string]any{"widgetry.io/probe": "true"}}
		original, err := normalize(probe)
		if err != nil {
			return err
		}
		there, err := convertOnce(ctx, httpClient, target, group+"/"+p.to, original)
		if err != nil {
			return fmt.Errorf("conversion webhook %s, %s to %s: %w", target, p.from, p.to, err)
		}
		back, err := convertOnce(ctx, httpClient, target, group+"/"+p.from, there)
		if err != nil {
			return fmt.Errorf("conversion webhook %s, %s to %s: %w", target, p.to, p.from, err)
		}
		// Strictly equal: a list that comes back empty instead of absent is a change too.
		if !reflect.DeepEqual(original["spec"], back["spec"]) || !reflect.DeepEqual(original["metadata"], back["metadata"]) {
			return fmt.Errorf("conversion webhook %s lost data in a round trip %s -> %s -> %s: sent %v, got back %v", target, p.from, p.to, p.from, original, back)
		}
	}
	return nil
}

func strategyOf(live *apiextensionsv1.CustomResourceDefinition) any {
	if live.Spec.Conversion == nil {
		return "None"
	}
	return live.Spec.Conversion.Strategy
}

// webhookTarget is the URL the apiserver calls and the name its certificate must carry.
func webhookTarget(cc *apiextensionsv1.WebhookClientConfig) (string, string, error) {
	if cc.URL != nil {
		u, err := url.Parse(*cc.URL)
		if err != nil {
			return "", "", fmt.Errorf("conversion webhook URL %q: %w", *cc.URL, err)
		}
		return *cc.URL, u.Hostname(), nil
	}
	s := cc.Service
	if s == nil {
		return "", "", fmt.Errorf("conversion webhook has neither url nor service")
	}
	port := int32(443)
	if s.Port != nil {
		port = *s.Port
	}
	path := ""
	if s.Path != nil {
		path = *s.Path
	}
	host := fmt.Sprintf("%s.%s.svc", s.Name, s.Namespace)
	return fmt.Sprintf("https://%s:%d%s", host, port, path), host, nil
}

// serviceProxy is a client with rc's credentials and the URL of the webhook Service's path
// through the apiserver's service proxy.
func serviceProxy(rc *rest.Config, s *apiextensionsv1.ServiceReference, timeout time.Duration) (*http.Client, string, error) {
	rc = rest.CopyConfig(rc)
	rc.Timeout = timeout
	hc, err := rest.HTTPClientFor(rc)
	if err != nil {
		return nil, "", fmt.Errorf("build a client for the apiserver's service proxy: %w", err)
	}
	port := int32(443)
	if s.Port != nil {
		port = *s.Port
	}
	u, err := url.Parse(rc.Host)
	if err != nil || u.Host == "" {
		u, err = url.Parse("https://" + rc.Host)
		if err != nil {
			return nil, "", fmt.Errorf("apiserver address %q: %w", rc.Host, err)
		}
	}
	// A Host with a path (a proxy in front of the apiserver) keeps it.
	u.Path = strings.TrimSuffix(u.Path, "/") + path.Join("/api/v1/namespaces", s.Namespace, "services", fmt.Sprintf("https:%s:%d", s.Name, port), "proxy")
	if s.Path != nil {
		u.Path += *s.Path
	}
	return hc, u.String(), nil
}

func normalize(obj map[string]any) (map[string]any, error) {
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	var out map[string]any
	return out, json.Unmarshal(b, &out)
}

// convertOnce sends one object and checks the answer: same uid, one object, the desired
// apiVersion, the same kind, Success.
func convertOnce(ctx context.Context, c *http.Client, target, desired string, obj map[string]any) (map[string]any, error) {
	const uid = "widgetctl-preflight-probe"
	body, err := json.Marshal(map[string]any{"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
		"request": map[string]any{"uid": uid, "desiredAPIVersion": desired, "objects": []any{obj}}})
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("no answer (%w); is the webhook Service ready and does its certificate verify against the CRD's caBundle? (widgetctl status shows both)", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP %d: %.300s", resp.StatusCode, data)
	}
	var review struct {
		Response struct {
			UID              string           `json:"uid"`
			ConvertedObjects []map[string]any `json:"convertedObjects"`
			Result           struct {
				Status, Message string
			} `json:"result"`
		} `json:"response"`
	}
	if err := json.Unmarshal(data, &review); err != nil {
		return nil, fmt.Errorf("answer is not a ConversionReview: %w", err)
	}
	r := review.Response
	switch {
	case r.UID != uid:
		return nil, fmt.Errorf("answer uid %q, want %q", r.UID, uid)
	case r.Result.Status != "Success":
		return nil, fmt.Errorf("conversion failed: %s", r.Result.Message)
	case len(r.ConvertedObjects) != 1:
		return nil, fmt.Errorf("%d objects answered for 1", len(r.ConvertedObjects))
	case r.ConvertedObjects[0]["apiVersion"] != desired || r.ConvertedObjects[0]["kind"] != obj["kind"]:
		return nil, fmt.Errorf("answered %v %v, want %s %v", r.ConvertedObjects[0]["apiVersion"], r.ConvertedObjects[0]["kind"], desired, obj["kind"])
	}
	return r.ConvertedObjects[0], nil
}
