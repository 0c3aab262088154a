package metrics

import (
	"context"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Metric names of the CRD collector.
const (
	CRDVersionInfoName    = "widget_crd_version_info"
	CRDStoredVersionsName = "widget_crd_stored_versions"
	CRDBreakGlassName     = "widget_crd_break_glass"
)

// BreakGlassAnnotation on a CRD lets a change past the stage guard (the chart's
// ValidatingAdmissionPolicy); its value is the reason. It should be set only for the length of
// a procedure, so the manager exports it and an alert fires while it is there.
const BreakGlassAnnotation = "widgetry.io/break-glass"

// crdReadTimeout bounds one CRD read during a scrape; Prometheus' default scrape timeout is 10s.
const crdReadTimeout = 5 * time.Second

var (
	crdVersionInfoDesc = prometheus.NewDesc(CRDVersionInfoName,
		"One series per version in the CRD's spec.versions, value 1; served and storage are \"true\" or \"false\".",
		[]string{"crd", "version", "served", "storage"}, nil)
	crdStoredVersionsDesc = prometheus.NewDesc(CRDStoredVersionsName,
		"One series per version in the CRD's status.storedVersions (versions objects may still be stored in), value 1.",
		[]string{"crd", "version"}, nil)
	crdBreakGlassDesc = prometheus.NewDesc(CRDBreakGlassName,
		"1 while the CRD carries the "+BreakGlassAnnotation+" annotation (changes pass the stage guard), else 0.",
		[]string{"crd"}, nil)
)

// CRDCollector exports widget_crd_version_info, widget_crd_stored_versions and
// widget_crd_break_glass for a fixed set of
// CRDs, read through a client.Reader at scrape time. A CRD that does not exist yields no series;
// a CRD that cannot be read is logged and yields no series, so one failing read never fails the
// whole scrape (controller-runtime's handler answers 500 on any collector error).
type CRDCollector struct {
	reader client.Reader
	log    logr.Logger
	names  []string
}

var _ prometheus.Collector = (*CRDCollector)(nil)

// NewCRDCollector returns a collector for the named CRDs (label values are bounded by names).
func NewCRDCollector(reader client.Reader, log logr.Logger, names ...string) *CRDCollector {
	return &CRDCollector{reader: reader, log: log, names: append([]string(nil), names...)}
}

// Describe implements prometheus.Collector.
func (c *CRDCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- crdVersionInfoDesc
	ch <- crdStoredVersionsDesc
	ch <- crdBreakGlassDesc
}

// Collect implements prometheus.Collector.
func (c *CRDCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), crdReadTimeout)
	defer cancel()
	for _, name := range c.names {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := c.reader.Get(ctx, client.ObjectKey{Name: name}, crd); err != nil {
			if !apierrors.IsNotFound(err) {
				c.log.Error(err, "read CRD for metrics; its widget_crd_* series are missing from this scrape", "crd", name)
			}
			continue
		}
		for _, v := range crd.Spec.Versions {
			ch <- prometheus.MustNewConstMetric(crdVersionInfoDesc, prometheus.GaugeValue, 1,
				name, v.Name, strconv.FormatBool(v.Served), strconv.FormatBool(v.Storage))
		}
		seen := map[string]bool{}
		for _, v := range crd.Status.StoredVersions {
			if seen[v] {
				continue // a duplicate would make the scrape fail; the apiserver never writes one
			}
			seen[v] = true
			ch <- prometheus.MustNewConstMetric(crdStoredVersionsDesc, prometheus.GaugeValue, 1, name, v)
		}
		breakGlass := 0.0
		if crd.Annotations[BreakGlassAnnotation] != "" {
			breakGlass = 1
		}
		ch <- prometheus.MustNewConstMetric(crdBreakGlassDesc, prometheus.GaugeValue, breakGlass, name)
	}
}
