//go:build envtest

package webhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/widgetry/widget-operator/internal/testenv"
	"github.com/widgetry/widget-operator/internal/testenv/widgetenv"
)

// BenchmarkListThroughConversion measures a LIST of N Widgets stored as v1
// (WIDGET_BENCH_WIDGETS, default 10000) through v1alpha1, every object converted by this
// webhook (a webhook.ConversionHandler served over TLS in the test process), against the
// same LIST through v1, which converts nothing: the same apiserver, the same run.
// pages=all is one unpaginated LIST (the apiserver sends all N objects in one
// ConversionReview), pages=500 lists in pages of 500 (a review per page). One op is a whole
// LIST, every page read to the end, decoded just enough to follow continue tokens and to
// check that it held N items - a client must read it all anyway. Half the Widgets hold what
// v1alpha1 cannot express (widgetenv.CreateWidgets), so their v1alpha1 form carries the
// conversion-data annotation. scripts/bench-ratios.sh prints v1alpha1/v1 per pages setting
// (target <= 1.1).
func BenchmarkListThroughConversion(b *testing.B) {
	n := widgetenv.EnvInt(b, "WIDGET_BENCH_WIDGETS", 10000)
	env := widgetenv.StartWithConversionWebhook(b, "v1", testenv.Options{})
	const ns = "fleet"
	if err := env.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		b.Fatal(err)
	}
	widgetenv.CreateWidgets(b, env.Client, ns, n)
	hc, err := rest.HTTPClientFor(env.Config)
	if err != nil {
		b.Fatal(err)
	}
	l := &lister{http: hc, host: strings.TrimSuffix(env.Config.Host, "/"), namespace: ns, want: n}

	for _, pages := range []int{0, 500} {
		for _, version := range []string{"v1alpha1", "v1"} {
			// Outside the timer: the first LIST of each kind warms the apiserver's paths and
			// the connections (to the webhook too), and gives the bytes a LIST reads.
			size := l.list(b, version, pages)
			name := "pages=all"
			if pages > 0 {
				name = "pages=" + strconv.Itoa(pages)
			}
			b.Run(name+"/version="+version, func(b *testing.B) {
				b.SetBytes(int64(size))
				for b.Loop() {
					l.list(b, version, pages)
				}
				// The collection's size, so that a published table says what it measured.
				b.ReportMetric(float64(n), "widgets")
			})
		}
	}
}

// lister LISTs the Widgets of one namespace over plain HTTP(S), reusing one buffer.
type lister struct {
	http      *http.Client
	host      string
	namespace string
	want      int
	buf       bytes.Buffer
}

// list reads every page of a LIST through version (limit 0: unpaginated), fails the
// benchmark unless it holds want items, and returns the bytes read.
func (l *lister) list(b *testing.B, version string, limit int) int {
	b.Helper()
	items, size, cont := 0, 0, ""
	for {
		q := url.Values{}
		if limit > 0 {
			q.Set("limit", strconv.Itoa(limit))
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

type listPage struct {
	items int
	cont  string
}

func (l *lister) get(u string) (listPage, error) {
	req, err := http.NewRequest(http.MethodGet, u, http.NoBody)
	if err != nil {
		return listPage{}, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := l.http.Do(req)
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
