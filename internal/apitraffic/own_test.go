package apitraffic

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestOwnCounterVerbs: each request is counted under the verb label kube-apiserver gives it,
// only for the counter's resource, and only when the apiserver's handler answered.
func TestOwnCounterVerbs(t *testing.T) {
	status := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(status) }))
	defer srv.Close()
	o := NewOwnCounter("widgetry.io", "widgets", "widgetctl verify")
	hc := &http.Client{Transport: o.Wrap(http.DefaultTransport)}
	send := func(method, path, contentType string) {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	const ns = "/apis/widgetry.io/v1alpha1/namespaces/shop/widgets"
	send("GET", ns+"/web", "")
	send("GET", ns+"/web/status", "")
	send("GET", ns, "")
	send("GET", "/apis/widgetry.io/v1alpha1/widgets", "")
	send("GET", ns+"?watch=true", "")
	send("GET", "/apis/widgetry.io/v1alpha1/watch/namespaces/shop/widgets", "")
	send("POST", ns+"?dryRun=All", "application/json")
	send("PUT", ns+"/web", "application/json")
	send("PATCH", ns+"/web", "application/merge-patch+json")
	send("PATCH", ns+"/web", "application/apply-patch+yaml")
	send("DELETE", ns+"/web", "")
	send("DELETE", ns, "")
	send("GET", "/apis/widgetry.io/v1/namespaces/shop/widgets/web", "")
	// Not ours: other resources, groups, the core API, the discovery of the group.
	send("GET", "/apis/widgetry.io/v1alpha1/namespaces/shop/gadgets/web", "")
	send("GET", "/apis/apps/v1/namespaces/shop/deployments/web", "")
	send("GET", "/api/v1/namespaces/shop/configmaps/widgets", "")
	send("GET", "/apis/widgetry.io/v1alpha1", "")
	// Answers the apiserver does not count under the resource.
	for _, code := range []int{http.StatusUnauthorized, http.StatusForbidden, http.StatusServiceUnavailable} {
		status = code
		send("GET", ns+"/web", "")
	}
	status = http.StatusNotFound
	send("GET", ns+"/gone", "")

	got := o.Take()
	if len(got) != 2 || got[0].Version != "v1" || got[1].Version != "v1alpha1" {
		t.Fatalf("records %+v, want one for v1 and one for v1alpha1", got)
	}
	want := map[string]float64{"GET": 3, "LIST": 2, "WATCH": 2, "POST": 1, "PUT": 1, "PATCH": 1, "APPLY": 1, "DELETE": 1, "DELETECOLLECTION": 1}
	if a := got[1]; len(a.Requests) != len(want) || a.Client != "widgetctl verify" || a.From.After(a.To) {
		t.Errorf("v1alpha1 record %+v, want %v", a, want)
	}
	for verb, n := range want {
		if got[1].Requests[verb] != n {
			t.Errorf("%s: %v, want %v", verb, got[1].Requests[verb], n)
		}
	}
	if again := o.Take(); len(again) != 0 {
		t.Errorf("a second Take returned %+v", again)
	}
}

// TestExcludeOwn: our own requests are subtracted only when they lie wholly inside the window
// every instance counted without a gap; a doubt leaves them counted.
func TestExcludeOwn(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	sample := func(at time.Time, start float64, get float64) Sample {
		return Sample{Time: at, Instances: []InstanceCounts{{Address: "a", StartTime: start, Requests: map[string]float64{"GET": get, "LIST": 1}}}}
	}
	own := func(from, to time.Time, get float64) OwnRecord {
		return OwnRecord{Client: "widgetctl verify", Version: "v1alpha1", From: from, To: to, Requests: map[string]float64{"GET": get}}
	}
	start := float64(t0.Add(-time.Hour).Unix())
	base := sample(t0, start, 10)
	for _, tc := range []struct {
		name    string
		now     Sample
		own     []OwnRecord
		wantGET float64
		want    string
	}{
		{"ours alone", sample(t0.Add(time.Hour), start, 14), []OwnRecord{own(t0.Add(time.Minute), t0.Add(2*time.Minute), 4)}, 0, "our own requests not counted: GET 4 by widgetctl verify"},
		{"ours and another client's", sample(t0.Add(time.Hour), start, 15), []OwnRecord{own(t0.Add(time.Minute), t0.Add(2*time.Minute), 4)}, 1, "GET 1"},
		{"before the baseline", sample(t0.Add(time.Hour), start, 14), []OwnRecord{own(t0.Add(-time.Minute), t0.Add(-time.Second), 4)}, 4, "GET 4"},
		{"straddling the baseline", sample(t0.Add(time.Hour), start, 14), []OwnRecord{own(t0.Add(-time.Minute), t0.Add(time.Minute), 4)}, 4, "GET 4"},
		{"after the sample", sample(t0.Add(time.Hour), start, 14), []OwnRecord{own(t0.Add(time.Minute), t0.Add(2*time.Hour), 4)}, 4, "GET 4"},
		{"another version", sample(t0.Add(time.Hour), start, 14), []OwnRecord{{Version: "v1", From: t0.Add(time.Minute), To: t0.Add(2 * time.Minute), Requests: map[string]float64{"GET": 4}}}, 4, "GET 4"},
		// The instance restarted 30 minutes in: what it counted before is gone, so only our
		// requests after its start may be subtracted.
		{"before a restart", sample(t0.Add(time.Hour), float64(t0.Add(30*time.Minute).Unix()), 3), []OwnRecord{own(t0.Add(time.Minute), t0.Add(2*time.Minute), 4)}, 3, "restarted"},
		{"after a restart", sample(t0.Add(time.Hour), float64(t0.Add(30*time.Minute).Unix()), 3), []OwnRecord{own(t0.Add(31*time.Minute), t0.Add(32*time.Minute), 3)}, 0, "GET 3 by"},
		// More subtracted than counted: an instance not asked served ours; clamped, and said.
		{"more than counted", sample(t0.Add(time.Hour), start, 12), []OwnRecord{own(t0.Add(time.Minute), t0.Add(2*time.Minute), 4)}, 0, "counted fewer of our own requests than we sent (GET 2 of 4)"},
	} {
		tr := Compare(&base, tc.now, widgets)
		tr.ExcludeOwn(tc.own)
		if tr.ByVerb["GET"] != tc.wantGET || !strings.Contains(tr.String(), tc.want) {
			t.Errorf("%s: GET %v, want %v; %s (want %q)", tc.name, tr.ByVerb["GET"], tc.wantGET, tr, tc.want)
		}
	}
}
