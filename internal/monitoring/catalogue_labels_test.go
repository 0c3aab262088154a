package monitoring

import (
	"context"
	"crypto/x509"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/widgetry/widget-operator/internal/controller"
	"github.com/widgetry/widget-operator/internal/manager"
	widgetmetrics "github.com/widgetry/widget-operator/internal/metrics"
	"github.com/widgetry/widget-operator/internal/migrate"
	"github.com/widgetry/widget-operator/internal/serving"
	"github.com/widgetry/widget-operator/internal/webhook"
)

// keeping is a Registerer that keeps what is registered, so the test can read the Descs.
type keeping struct{ collectors []prometheus.Collector }

func (k *keeping) Register(c prometheus.Collector) error {
	k.collectors = append(k.collectors, c)
	return nil
}
func (k *keeping) MustRegister(cs ...prometheus.Collector) {
	k.collectors = append(k.collectors, cs...)
}
func (k *keeping) Unregister(prometheus.Collector) bool { return true }

// descString parses prometheus.Desc's String(): Desc{fqName: "…", help: "…", unit: "…",
// constLabels: {a="x",b="y"}, variableLabels: {c,d}}.
var descString = regexp.MustCompile(`^Desc\{fqName: "([^"]+)", .*constLabels: \{([^}]*)\}, variableLabels: \{([^}]*)\}\}$`)

// TestCatalogueLabelsMatchCode compares the labels column of every widget_ metric in the
// catalogue with the labels the exporting code declares, and checks that every widget_ metric
// the code declares is catalogued.
func TestCatalogueLabelsMatchCode(t *testing.T) {
	kept := &keeping{}
	if _, err := webhook.NewConversionMetrics(kept); err != nil {
		t.Fatal(err)
	}
	if err := manager.RegisterControllerMetrics(kept); err != nil {
		t.Fatal(err)
	}
	if _, err := webhook.NewInFlightBudget(1, time.Second, kept); err != nil {
		t.Fatal(err)
	}
	if _, err := serving.NewListenerMetrics(kept); err != nil {
		t.Fatal(err)
	}
	if _, err := serving.NewAuthFailureLimiter("metrics", 1, 1, kept); err != nil {
		t.Fatal(err)
	}
	collectors := append([]prometheus.Collector{
		widgetmetrics.NewBuildInfoCollector("test"),
		widgetmetrics.NewPlacementCollector(widgetmetrics.Placement{}),
		widgetmetrics.NewCRDCollector(nil, logr.Discard(), WidgetCRD),
		widgetmetrics.NewCertificateExpiryCollector(func() *x509.Certificate { return nil }),
		widgetmetrics.NewCertificateTrustCollector(func(context.Context) widgetmetrics.CertificateStatus { return widgetmetrics.CertificateStatus{} }),
		widgetmetrics.NewCABundleGauge(),
		migrate.NewProgressCollector(nil, "widget-system"),
		controller.NewPausedCollector(nil, logr.Discard()),
	}, kept.collectors...)

	declared := map[string][]string{}
	for _, c := range collectors {
		ch := make(chan *prometheus.Desc, 16)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			m := descString.FindStringSubmatch(d.String())
			if m == nil {
				t.Fatalf("cannot read %s", d)
			}
			declared[m[1]] = append(labelSet(m[2]), labelSet(m[3])...)
			sort.Strings(declared[m[1]])
		}
	}
	catalogue := readCatalogue(t)
	for name, labels := range declared {
		e, ok := catalogue[name]
		if !ok {
			t.Errorf("%s is declared by the code but missing from the catalogue", name)
			continue
		}
		if got := labelSet(e.labels); !slices.Equal(got, labels) {
			t.Errorf("catalogue lists the labels of %s as %v, the code declares %v", name, got, labels)
		}
	}
	for name := range catalogue {
		if _, ok := declared[name]; strings.HasPrefix(name, "widget_") && !ok {
			t.Errorf("catalogue lists %s, which none of the project's collectors declares", name)
		}
	}
}

// labelSet turns `a, b` or `a="x",b="y"` or `—` into sorted label names.
func labelSet(s string) []string {
	out := []string{}
	for _, l := range strings.Split(s, ",") {
		l = strings.TrimSpace(l)
		if k, _, ok := strings.Cut(l, "="); ok {
			l = k
		}
		if l == "" || l == "—" {
			continue
		}
		out = append(out, l)
	}
	sort.Strings(out)
	return out
}
