//go:build envtest

package webhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/testenv"
	"github.com/widgetry/widget-operator/internal/testenv/widgetenv"
	"github.com/widgetry/widget-operator/internal/webhook"
)

// BenchmarkListThroughConversion measures a LIST of N Widgets stored as v1
// (WIDGET_BENCH_WIDGETS, default 10000) through v1alpha1, every object converted by this
// webhook (a webhook.ConversionHandler served over TLS in the test process), against the
// same LIST through v1, which converts nothing: the same apiserver, the same run. The shapes:
// pages=all is one unpaginated LIST, rv=0 the same from the apiserver's watch cache
// (resourceVersion=0), pages=500 lists in pages of 500, and watch is the start of a watch
// from the watch cache (resourceVersion=0: an ADDED event per Widget), read until it has
// delivered all N. One op is a whole LIST, every page read to the end, decoded just enough to
// follow continue tokens and to check that it held N items - a client must read it all
// anyway. Half the Widgets hold what v1alpha1 cannot express (widgetenv.CreateWidgets), so
// their v1alpha1 form carries the conversion-data annotation. scripts/bench-ratios.sh prints
// v1alpha1/v1 per shape (target <= 1.1).
//
// What the apiserver sent the webhook during each shape's LISTs comes from the handler's own
// metrics (widget_conversion_review_objects and _bytes): reviews/op, and when there were any,
// objects/review and KiB/review (means) and max-review-objects-le (the upper bound of the
// largest review's bucket).
func BenchmarkListThroughConversion(b *testing.B) {
	n := widgetenv.EnvInt(b, "WIDGET_BENCH_WIDGETS", 10000)
	reg := prometheus.NewRegistry()
	metrics, err := webhook.NewConversionMetrics(reg)
	if err != nil {
		b.Fatal(err)
	}
	env := widgetenv.StartWithConversionHandler(b, "v1", &webhook.ConversionHandler{Metrics: metrics}, testenv.Options{})
	const ns = "fleet"
	for _, name := range []string{ns, "created"} {
		if err := env.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
			b.Fatal(err)
		}
	}
	widgetenv.CreateWidgets(b, env.Client, ns, n)
	// Each create sends reviews (create/version=), and the watch caches convert the objects as
	// they catch up: at 100,000 Widgets they still do after the last create has returned. The
	// LISTs are measured once the webhook is quiet.
	settleReviews(b, reg)
	hc, err := rest.HTTPClientFor(env.Config)
	if err != nil {
		b.Fatal(err)
	}
	l := &lister{http: hc, host: strings.TrimSuffix(env.Config.Host, "/"), namespace: ns, want: n}

	for _, shape := range []listShape{{name: "pages=all"}, {name: "rv=0", fromCache: true}, {name: "pages=500", limit: 500}, {name: "watch", watch: true}} {
		for _, version := range []string{"v1alpha1", "v1"} {
			// Outside the timer: the first LIST of each kind warms the apiserver's paths and
			// the connections (to the webhook too), and gives the bytes a LIST reads.
			size := l.list(b, version, shape)
			b.Run(shape.name+"/version="+version, func(b *testing.B) {
				b.SetBytes(int64(size))
				before := reviewSizes(b, reg)
				for b.Loop() {
					l.list(b, version, shape)
				}
				reportReviews(b, before, reviewSizes(b, reg), n)
			})
		}
	}

	// Writes: each op creates one Widget through version, in another namespace. (-count runs
	// a sub-benchmark again in the same apiserver: the names go on counting.)
	created := 0
	for _, version := range []string{"v1alpha1", "v1"} {
		b.Run("create/version="+version, func(b *testing.B) {
			before := reviewSizes(b, reg)
			for b.Loop() {
				created++
				l.create(b, version, fmt.Sprintf("created-%d", created))
			}
			settleReviews(b, reg)
			reportReviews(b, before, reviewSizes(b, reg), n)
		})
	}

	// A change to the CRD's spec (here a printer column; in life a caBundle injected, a chart
	// upgrade, a storage flip) makes the apiserver drop the CRD's storage and watch caches and
	// build them anew: each op changes the spec, waits until the apiserver serves from the
	// storage built anew (its tables show the change), LISTs through v1alpha1 until the LIST
	// succeeds (the apiserver answers 429 "storage is (re)initializing" meanwhile; counted
	// in 429/op, each retried after the second it asks for), and waits until the webhook has
	// received no review for a second. rebuild-s is from the change to the last review.
	changes := 0
	b.Run("rebuild/version=v1alpha1", func(b *testing.B) {
		before, last, tooMany := reviewSizes(b, reg), time.Duration(0), 0
		for b.Loop() {
			changes++
			start := time.Now()
			description := touchCRDSpec(b, env, changes)
			// The apiserver drops the storage when its informer sees the change, moments after
			// the update returned; until then a LIST is still served by the old one. The new
			// storage's tables describe the column anew.
			tooMany += l.waitForColumn(b, "v1alpha1", description)
			tooMany += l.listUntilServed(b, "v1alpha1")
			last += settleReviews(b, reg).Sub(start)
		}
		b.ReportMetric(float64(tooMany)/float64(b.N), "429/op")
		b.ReportMetric(last.Seconds()/float64(b.N), "rebuild-s")
		reportReviews(b, before, reviewSizes(b, reg), n)
	})
}

// reportReviews reports what the webhook received between before and after, per op: the
// reviews, and when there were any, the objects and KiB of a review (means) and the bound of
// the largest one's bucket; and n, the collection's size, so that a published table says
// what it measured.
func reportReviews(b *testing.B, before, after reviewSizeCounts, n int) {
	b.Helper()
	reviews := float64(after.count - before.count)
	b.ReportMetric(reviews/float64(b.N), "reviews/op")
	if reviews > 0 {
		b.ReportMetric((after.objects-before.objects)/reviews, "objects/review")
		b.ReportMetric((after.bytes-before.bytes)/reviews/1024, "KiB/review")
		b.ReportMetric(largestBucket(before.buckets, after.buckets), "max-review-objects-le")
	}
	b.ReportMetric(float64(n), "widgets")
}

// settleReviews waits until the webhook has received no review for a second, and returns
// when it received the last one (as seen by polling every 50 ms).
func settleReviews(b *testing.B, reg *prometheus.Registry) time.Time {
	b.Helper()
	count, lastChange := reviewSizes(b, reg).count, time.Now()
	for time.Since(lastChange) < time.Second {
		time.Sleep(50 * time.Millisecond)
		if now := reviewSizes(b, reg).count; now != count {
			count, lastChange = now, time.Now()
		}
	}
	return lastChange
}

// touchCRDSpec changes the Widget CRD's spec without changing what it serves: a printer column
// of v1alpha1, whose description it returns.
func touchCRDSpec(b *testing.B, env *testenv.Env, i int) string {
	b.Helper()
	ctx := context.Background()
	c := &apiextensionsv1.CustomResourceDefinition{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: crd.WidgetName}, c); err != nil {
		b.Fatal(err)
	}
	description := fmt.Sprintf("the image (change %d)", i)
	for j := range c.Spec.Versions {
		if c.Spec.Versions[j].Name == "v1alpha1" {
			c.Spec.Versions[j].AdditionalPrinterColumns = []apiextensionsv1.CustomResourceColumnDefinition{
				{Name: "Image", Type: "string", JSONPath: ".spec.image", Description: description}}
		}
	}
	if err := env.Client.Update(ctx, c); err != nil {
		b.Fatalf("change the CRD's spec: %v", err)
	}
	return description
}

// listShape is how a LIST is asked for.
type listShape struct {
	name      string
	limit     int  // page size; 0: unpaginated
	fromCache bool // resourceVersion=0
	watch     bool // a watch from resourceVersion=0, read until every object was added
}

// reviewSizeCounts are the conversion handler's review-size histograms at one moment.
type reviewSizeCounts struct {
	count          uint64
	objects, bytes float64
	// buckets is widget_conversion_review_objects' cumulative count per upper bound.
	buckets map[float64]uint64
}

func reviewSizes(b *testing.B, reg *prometheus.Registry) reviewSizeCounts {
	b.Helper()
	families, err := reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	out := reviewSizeCounts{buckets: map[float64]uint64{}}
	for _, f := range families {
		switch f.GetName() {
		case "widget_conversion_review_objects":
			h := f.GetMetric()[0].GetHistogram()
			out.count, out.objects = h.GetSampleCount(), h.GetSampleSum()
			for _, bk := range h.GetBucket() {
				out.buckets[bk.GetUpperBound()] = bk.GetCumulativeCount()
			}
		case "widget_conversion_review_bytes":
			out.bytes = f.GetMetric()[0].GetHistogram().GetSampleSum()
		}
	}
	return out
}

// largestBucket is the smallest upper bound under which every review counted between before
// and after falls (+Inf past the last bucket).
func largestBucket(before, after map[float64]uint64) float64 {
	bounds := make([]float64, 0, len(after))
	for le := range after {
		bounds = append(bounds, le)
	}
	slices.Sort(bounds)
	if len(bounds) == 0 {
		return math.Inf(1)
	}
	last := bounds[len(bounds)-1]
	total := after[last] - before[last]
	for _, le := range bounds {
		if after[le]-before[le] == total {
			return le
		}
	}
	return math.Inf(1)
}

// lister LISTs the Widgets of one namespace over plain HTTP(S), reusing one buffer.
type lister struct {
	http      *http.Client
	host      string
	namespace string
	want      int
	buf       bytes.Buffer
}

// list reads every page of a LIST through version in shape, fails the benchmark unless it
// holds want items, and returns the bytes read.
func (l *lister) list(b *testing.B, version string, shape listShape) int {
	b.Helper()
	if shape.watch {
		return l.watchStart(b, version)
	}
	items, size, cont := 0, 0, ""
	for {
		q := url.Values{}
		if shape.limit > 0 {
			q.Set("limit", strconv.Itoa(shape.limit))
		}
		if shape.fromCache {
			q.Set("resourceVersion", "0")
		}
		if cont != "" {
			q.Set("continue", cont)
		}
		u := fmt.Sprintf("%s/apis/widgetry.io/%s/namespaces/%s/widgets?%s", l.host, version, l.namespace, q.Encode())
		page, err := l.get(u)
		if err != nil {
			b.Fatalf("LIST %s: %v", u, err)
		}
		items += page.items
		size += l.buf.Len()
		if cont = page.cont; cont == "" {
			break
		}
	}
	if items != l.want {
		b.Fatalf("LIST through %s returned %d Widgets, want %d", version, items, l.want)
	}
	return size
}

// watchStart opens a watch through version from resourceVersion=0, reads its events until
// every Widget has been added, closes it and returns the bytes read.
func (l *lister) watchStart(b *testing.B, version string) int {
	b.Helper()
	u := fmt.Sprintf("%s/apis/widgetry.io/%s/namespaces/%s/widgets?watch=1&resourceVersion=0", l.host, version, l.namespace)
	resp, err := l.send(u, "application/json")
	if err != nil {
		b.Fatalf("WATCH %s: %v", u, err)
	}
	defer resp.Body.Close()
	expectStatus(b, resp, http.StatusOK, "WATCH "+u)
	counted := &countingReader{r: resp.Body}
	dec := json.NewDecoder(counted)
	for added := 0; added < l.want; {
		var ev struct {
			Type   string          `json:"type"`
			Object json.RawMessage `json:"object"`
		}
		if err := dec.Decode(&ev); err != nil {
			b.Fatalf("WATCH through %s: after %d of %d Widgets: %v", version, added, l.want, err)
		}
		switch ev.Type {
		case "ADDED":
			added++
		case "ERROR":
			b.Fatalf("WATCH through %s: after %d of %d Widgets: %s", version, added, l.want, ev.Object)
		}
	}
	return counted.n
}

// listUntilServed LISTs through version, unpaginated, until the apiserver serves the LIST,
// each 429 retried after a second, and returns how many 429s it got.
func (l *lister) listUntilServed(b *testing.B, version string) int {
	b.Helper()
	u := fmt.Sprintf("%s/apis/widgetry.io/%s/namespaces/%s/widgets", l.host, version, l.namespace)
	for tooMany := 0; ; tooMany++ {
		page, err := l.get(u)
		switch {
		case err == nil && page.items == l.want:
			return tooMany
		case err == nil:
			b.Fatalf("LIST through %s returned %d Widgets, want %d", version, page.items, l.want)
		case !strings.HasPrefix(err.Error(), strconv.Itoa(http.StatusTooManyRequests)+" "):
			b.Fatalf("LIST %s: %v", u, err)
		}
		time.Sleep(time.Second)
	}
}

// waitForColumn asks for one Widget through version as a Table until the table describes a
// column with description (the storage built from the changed CRD answers), each 429 retried
// after a second, and returns how many 429s it got.
func (l *lister) waitForColumn(b *testing.B, version, description string) int {
	b.Helper()
	u := fmt.Sprintf("%s/apis/widgetry.io/%s/namespaces/%s/widgets?limit=1", l.host, version, l.namespace)
	tooMany := 0
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
		resp, err := l.send(u, "application/json;as=Table;v=v1;g=meta.k8s.io")
		if err != nil {
			b.Fatalf("Table %s: %v", u, err)
		}
		var table metav1.Table
		err = json.NewDecoder(resp.Body).Decode(&table)
		_ = resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusTooManyRequests:
			tooMany++
			time.Sleep(time.Second)
			continue
		case resp.StatusCode != http.StatusOK || err != nil:
			b.Fatalf("Table %s: %s, %v", u, resp.Status, err)
		}
		for _, col := range table.ColumnDefinitions {
			if col.Description == description {
				return tooMany
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	b.Fatalf("Table %s: no column described %q after a minute", u, description)
	return tooMany
}

// create creates a Widget named name through version in namespace "created".
func (l *lister) create(b *testing.B, version, name string) {
	b.Helper()
	body := fmt.Sprintf(`{"apiVersion":"widgetry.io/%s","kind":"Widget","metadata":{"name":%q},"spec":{"image":"registry.example.com/sample:v1"}}`, version, name)
	u := fmt.Sprintf("%s/apis/widgetry.io/%s/namespaces/created/widgets", l.host, version)
	resp, err := l.http.Post(u, "application/json", strings.NewReader(body))
	if err != nil {
		b.Fatalf("create through %s: %v", version, err)
	}
	defer resp.Body.Close()
	expectStatus(b, resp, http.StatusCreated, "create through "+version)
}

// expectStatus fails b unless resp has the status want, quoting the start of its body.
func expectStatus(b *testing.B, resp *http.Response, want int, what string) {
	b.Helper()
	if resp.StatusCode != want {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		b.Fatalf("%s: %s: %s", what, resp.Status, body)
	}
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

type listPage struct {
	items int
	cont  string
}

// send GETs u accepting accept; the caller closes the answer's body.
func (l *lister) send(u, accept string) (*http.Response, error) {
	req, err := http.NewRequest(http.MethodGet, u, http.NoBody)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", accept)
	return l.http.Do(req)
}

func (l *lister) get(u string) (listPage, error) {
	resp, err := l.send(u, "application/json")
	if err != nil {
		return listPage{}, err
	}
	defer resp.Body.Close()
	l.buf.Reset()
	if _, err := l.buf.ReadFrom(resp.Body); err != nil {
		return listPage{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return listPage{}, fmt.Errorf("%s: %.300s", resp.Status, l.buf.Bytes())
	}
	// Items into empty structs: encoding/json scans them without building anything.
	var page struct {
		Metadata struct {
			Continue string `json:"continue"`
		} `json:"metadata"`
		Items []struct{} `json:"items"`
	}
	if err := json.Unmarshal(l.buf.Bytes(), &page); err != nil {
		return listPage{}, fmt.Errorf("decode the list: %w", err)
	}
	return listPage{items: len(page.Items), cont: page.Metadata.Continue}, nil
}
