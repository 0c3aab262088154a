package metrics

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// crdReader serves CRDs from a map; a name mapped to nil answers with readErr.
type crdReader struct {
	crds    map[string]*apiextensionsv1.CustomResourceDefinition
	readErr error
}

func (r crdReader) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	c, ok := r.crds[key.Name]
	if !ok {
		return apierrors.NewNotFound(schema.GroupResource{Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"}, key.Name)
	}
	if c == nil {
		return r.readErr
	}
	c.DeepCopyInto(obj.(*apiextensionsv1.CustomResourceDefinition))
	return nil
}

func (r crdReader) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return errors.New("not implemented")
}

func widgetCRD(storedVersions []string, versions ...apiextensionsv1.CustomResourceDefinitionVersion) *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.widgetry.io"},
		Spec:       apiextensionsv1.CustomResourceDefinitionSpec{Versions: versions},
		Status:     apiextensionsv1.CustomResourceDefinitionStatus{StoredVersions: storedVersions},
	}
}

func version(name string, served, storage bool) apiextensionsv1.CustomResourceDefinitionVersion {
	return apiextensionsv1.CustomResourceDefinitionVersion{Name: name, Served: served, Storage: storage}
}

func withBreakGlass(c *apiextensionsv1.CustomResourceDefinition) *apiextensionsv1.CustomResourceDefinition {
	c.Annotations = map[string]string{BreakGlassAnnotation: "INC-1: conversion webhook down"}
	return c
}

func TestCRDCollector(t *testing.T) {
	tests := []struct {
		name   string
		reader crdReader
		names  []string
		want   string
	}{{
		name: "flip-storage: both served, v1 storage, both stored",
		reader: crdReader{crds: map[string]*apiextensionsv1.CustomResourceDefinition{
			"widgets.widgetry.io": widgetCRD([]string{"v1alpha1", "v1"}, version("v1alpha1", true, false), version("v1", true, true)),
		}},
		names: []string{"widgets.widgetry.io"},
		want: `
widget_crd_break_glass{crd="widgets.widgetry.io"} 0
widget_crd_stored_versions{crd="widgets.widgetry.io",version="v1"} 1
widget_crd_stored_versions{crd="widgets.widgetry.io",version="v1alpha1"} 1
widget_crd_version_info{crd="widgets.widgetry.io",served="true",storage="false",version="v1alpha1"} 1
widget_crd_version_info{crd="widgets.widgetry.io",served="true",storage="true",version="v1"} 1
`,
	}, {
		name: "unserve: v1alpha1 not served, only v1 stored; changed under break-glass",
		reader: crdReader{crds: map[string]*apiextensionsv1.CustomResourceDefinition{
			"widgets.widgetry.io": withBreakGlass(widgetCRD([]string{"v1"}, version("v1alpha1", false, false), version("v1", true, true))),
		}},
		names: []string{"widgets.widgetry.io"},
		want: `
widget_crd_break_glass{crd="widgets.widgetry.io"} 1
widget_crd_stored_versions{crd="widgets.widgetry.io",version="v1"} 1
widget_crd_version_info{crd="widgets.widgetry.io",served="false",storage="false",version="v1alpha1"} 1
widget_crd_version_info{crd="widgets.widgetry.io",served="true",storage="true",version="v1"} 1
`,
	}, {
		name:   "CRD not installed: no series",
		reader: crdReader{},
		names:  []string{"widgets.widgetry.io"},
		want:   "",
	}, {
		name: "one CRD unreadable: the other is still reported",
		reader: crdReader{readErr: errors.New("forbidden"), crds: map[string]*apiextensionsv1.CustomResourceDefinition{
			"gadgets.widgetry.io": nil,
			"widgets.widgetry.io": widgetCRD([]string{"v1alpha1", "v1alpha1"}, version("v1alpha1", true, true)),
		}},
		names: []string{"gadgets.widgetry.io", "widgets.widgetry.io"},
		want: `
widget_crd_break_glass{crd="widgets.widgetry.io"} 0
widget_crd_stored_versions{crd="widgets.widgetry.io",version="v1alpha1"} 1
widget_crd_version_info{crd="widgets.widgetry.io",served="true",storage="true",version="v1alpha1"} 1
`,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewPedanticRegistry()
			if err := Register(reg, Options{CRDReader: tt.reader, CRDNames: tt.names, Version: "v0.1.0"}); err != nil {
				t.Fatal(err)
			}
			if err := gatherAndCompare(reg, tt.want, CRDVersionInfoName, CRDStoredVersionsName, CRDBreakGlassName); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestRegisterRefusesReaderWithoutNames(t *testing.T) {
	err := Register(prometheus.NewRegistry(), Options{CRDReader: crdReader{}})
	if err == nil || !strings.Contains(err.Error(), "no CRD names") {
		t.Fatalf("Register() error = %v, want one naming the missing CRD names", err)
	}
}

func TestRegisterTwiceFails(t *testing.T) {
	reg := prometheus.NewRegistry()
	if err := Register(reg, Options{}); err != nil {
		t.Fatal(err)
	}
	if err := Register(reg, Options{}); err == nil {
		t.Fatal("second Register() on the same registry succeeded, want a duplicate-registration error")
	}
}

func selfSigned(t *testing.T, notAfter time.Time) *tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "widget-operator-webhook"},
		NotBefore:    notAfter.Add(-24 * time.Hour),
		NotAfter:     notAfter,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func TestCertificateExpiry(t *testing.T) {
	first := time.Date(2027, 1, 2, 3, 4, 5, 0, time.UTC)
	rotated := first.Add(90 * 24 * time.Hour)
	var served *tls.Certificate // what the "watcher" currently holds
	get := func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return served, nil }

	reg := prometheus.NewPedanticRegistry()
	if err := Register(reg, Options{Certificate: LeafCertificate(get)}); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name string
		cert *tls.Certificate
		want string
	}{
		{"nothing loaded yet", nil, ""},
		{"first certificate", selfSigned(t, first), fmt.Sprintf("%s %d\n%s %d\n", CertificateExpiryName, first.Unix(), CertificateNotBeforeName, first.Add(-24*time.Hour).Unix())},
		{"rotated without restart", selfSigned(t, rotated), fmt.Sprintf("%s %d\n%s %d\n", CertificateExpiryName, rotated.Unix(), CertificateNotBeforeName, rotated.Add(-24*time.Hour).Unix())},
	}
	for _, s := range steps {
		served = s.cert
		if err := gatherAndCompare(reg, s.want, CertificateExpiryName, CertificateNotBeforeName); err != nil {
			t.Errorf("%s: %v", s.name, err)
		}
	}
}

func TestCertificateExpiryFunc(t *testing.T) {
	notAfter := time.Date(2027, 3, 4, 5, 6, 7, 0, time.UTC)
	loaded := false
	reg := prometheus.NewPedanticRegistry()
	if err := Register(reg, Options{CertificateExpiry: func() (time.Time, bool) { return notAfter, loaded }}); err != nil {
		t.Fatal(err)
	}
	if err := gatherAndCompare(reg, "", CertificateExpiryName); err != nil {
		t.Errorf("not loaded: %v", err)
	}
	loaded = true
	// Only NotAfter is known: no NotBefore series.
	if err := gatherAndCompare(reg, fmt.Sprintf("%s %d", CertificateExpiryName, notAfter.Unix()), CertificateExpiryName, CertificateNotBeforeName); err != nil {
		t.Errorf("loaded: %v", err)
	}
	both := Options{
		Certificate:       func() *x509.Certificate { return nil },
		CertificateExpiry: func() (time.Time, bool) { return time.Time{}, false },
	}
	if err := Register(prometheus.NewRegistry(), both); err == nil {
		t.Error("Register() with Certificate and CertificateExpiry succeeded, want an error")
	}
}

func TestLeafCertificate(t *testing.T) {
	cert := selfSigned(t, time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC))
	parsed, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	withLeaf := *cert
	withLeaf.Leaf = parsed
	tests := []struct {
		name string
		cert *tls.Certificate
		err  error
		want *x509.Certificate
	}{
		{"leaf set", &withLeaf, nil, parsed},
		{"leaf parsed from DER", cert, nil, parsed},
		{"error", nil, errors.New("no certificate"), nil},
		{"empty chain", &tls.Certificate{}, nil, nil},
		{"garbage DER", &tls.Certificate{Certificate: [][]byte{[]byte("nope")}}, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := LeafCertificate(func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return tt.cert, tt.err })()
			switch {
			case tt.want == nil && got != nil:
				t.Errorf("LeafCertificate() = %v, want nil", got.Subject)
			case tt.want != nil && (got == nil || !got.Equal(tt.want)):
				t.Errorf("LeafCertificate() = %v, want the served leaf", got)
			}
		})
	}
}

func TestBuildInfo(t *testing.T) {
	tests := []struct{ version, want string }{
		{"v1.2.3", "v1.2.3"},
		{"", "unknown"}, // a test binary has no main module version
	}
	for _, tt := range tests {
		reg := prometheus.NewPedanticRegistry()
		if err := Register(reg, Options{Version: tt.version}); err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf(`
widget_build_info{go_version=%q,version=%q} 1
`, runtime.Version(), tt.want)
		if err := gatherAndCompare(reg, want, BuildInfoName); err != nil {
			t.Errorf("version %q: %v", tt.version, err)
		}
	}
}

func TestPlacement(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	if err := Register(reg, Options{Placement: &Placement{Node: "node-a", Zone: "zone-1"}}); err != nil {
		t.Fatal(err)
	}
	if err := gatherAndCompare(reg, `
widget_replica_placement_info{node="node-a",zone="zone-1"} 1
`, PlacementInfoName); err != nil {
		t.Error(err)
	}
	// Without a placement (a process outside a pod) there is no series.
	reg = prometheus.NewPedanticRegistry()
	if err := Register(reg, Options{}); err != nil {
		t.Fatal(err)
	}
	if err := gatherAndCompare(reg, "", PlacementInfoName); err != nil {
		t.Error(err)
	}
}

// gatherAndCompare gathers reg (failing on any collector error, as the manager's handler would)
// and compares the named families as "name{label="value",...} value" lines, order-insensitive.
func gatherAndCompare(reg prometheus.Gatherer, want string, names ...string) error {
	families, err := reg.Gather()
	if err != nil {
		return fmt.Errorf("gather: %w", err)
	}
	selected := map[string]bool{}
	for _, n := range names {
		selected[n] = true
	}
	var got []string
	for _, f := range families {
		if !selected[f.GetName()] {
			continue
		}
		if f.GetType() != dto.MetricType_GAUGE {
			return fmt.Errorf("%s is a %s, want a gauge", f.GetName(), f.GetType())
		}
		if f.GetHelp() == "" {
			return fmt.Errorf("%s has no help text", f.GetName())
		}
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			line := f.GetName()
			if len(labels) > 0 {
				line += "{" + strings.Join(labels, ",") + "}"
			}
			got = append(got, line+" "+strconv.FormatFloat(m.GetGauge().GetValue(), 'f', -1, 64))
		}
	}
	var wantLines []string
	for _, l := range strings.Split(want, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			wantLines = append(wantLines, l)
		}
	}
	sort.Strings(got)
	sort.Strings(wantLines)
	if diff := cmp.Diff(wantLines, got); diff != "" {
		return fmt.Errorf("series differ (-want +got):\n%s", diff)
	}
	return nil
}
