package apitraffic

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

var widgets = Resource{Group: "widgetry.io", Version: "v1alpha1", Resource: "widgets"}

// exposition is a kube-apiserver's /metrics in the shape it has (HELP and TYPE lines, other
// resources and versions, every label the apiserver sets).
func exposition(start float64, get, list, watches float64) string {
	return fmt.Sprintf(`# HELP apiserver_request_total [STABLE] Counter of apiserver requests broken out for each verb, dry run value, group, version, resource, scope, component, and HTTP response code.
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",component="apiserver",dry_run="",group="widgetry.io",resource="widgets",scope="resource",subresource="",verb="GET",version="v1alpha1"} %[2]g
apiserver_request_total{code="404",component="apiserver",dry_run="",group="widgetry.io",resource="widgets",scope="resource",subresource="",verb="GET",version="v1alpha1"} 1
apiserver_request_total{code="200",component="apiserver",dry_run="",group="widgetry.io",resource="widgets",scope="cluster",subresource="",verb="LIST",version="v1alpha1"} %[3]g
apiserver_request_total{code="200",component="apiserver",dry_run="",group="widgetry.io",resource="widgets",scope="cluster",subresource="",verb="LIST",version="v1"} 500
apiserver_request_total{code="200",component="apiserver",dry_run="",group="apps",resource="deployments",scope="cluster",subresource="",verb="LIST",version="v1"} 70
# HELP apiserver_longrunning_requests [STABLE] Gauge of all active long-running apiserver requests broken out by verb, group, version, resource, scope and component. Not all requests are tracked this way.
# TYPE apiserver_longrunning_requests gauge
apiserver_longrunning_requests{component="apiserver",group="widgetry.io",resource="widgets",scope="cluster",subresource="",verb="WATCH",version="v1alpha1"} %[4]g
apiserver_longrunning_requests{component="apiserver",group="widgetry.io",resource="widgets",scope="cluster",subresource="",verb="WATCH",version="v1"} 3
# HELP etcd_request_duration_seconds [ALPHA] Etcd request latency in seconds for each operation and object type.
# TYPE etcd_request_duration_seconds histogram
etcd_request_duration_seconds_bucket{operation="get",type="widgets.widgetry.io",le="0.005"} 10
etcd_request_duration_seconds_bucket{operation="get",type="widgets.widgetry.io",le="+Inf"} 10
etcd_request_duration_seconds_sum{operation="get",type="widgets.widgetry.io"} 0.01
etcd_request_duration_seconds_count{operation="get",type="widgets.widgetry.io"} 10
# HELP process_start_time_seconds [ALPHA] Start time of the process since unix epoch in seconds.
# TYPE process_start_time_seconds gauge
process_start_time_seconds %[1]g
`, start, get, list, watches)
}

func TestParse(t *testing.T) {
	in := InstanceCounts{Address: "a"}
	if err := in.parse(strings.NewReader(exposition(1.7e9, 5, 2, 1)), widgets); err != nil {
		t.Fatal(err)
	}
	// GET counts every answer (the 404 too); v1 and other resources are not counted.
	if in.Requests["GET"] != 6 || in.Requests["LIST"] != 2 || len(in.Requests) != 2 || in.Watches != 1 || in.StartTime != 1.7e9 {
		t.Errorf("parsed %+v", in)
	}
	for _, tc := range []struct{ name, body, want string }{
		{"not metrics", "<html>login</html>\n", "no apiserver_request_total"},
		{"a broken exposition", "# TYPE apiserver_request_total counter\napiserver_request_total{verb=\"GET\" 1\n", "not a Prometheus text exposition"},
		{"another program's metrics", "# TYPE go_goroutines gauge\ngo_goroutines 7\n", "no apiserver_request_total"},
	} {
		if err := (&InstanceCounts{}).parse(strings.NewReader(tc.body), widgets); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

// TestRead: every instance is asked at once over HTTPS; one that refuses or is down is
// reported, not counted.
func TestRead(t *testing.T) {
	ok := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, exposition(100, 3, 1, 0))
	}))
	defer ok.Close()
	forbidden := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, `{"kind":"Status","message":"forbidden: User \"x\" cannot get path \"/metrics\""}`, http.StatusForbidden)
	}))
	defer forbidden.Close()
	down := httptest.NewTLSServer(http.NotFoundHandler())
	downAddr := down.Listener.Addr().String()
	down.Close()

	addr := func(s *httptest.Server) string { return s.Listener.Addr().String() }
	s := Read(context.Background(), ok.Client(), []string{addr(ok), addr(forbidden), downAddr}, widgets, time.Unix(1000, 0))
	if len(s.Instances) != 3 || s.Instances[0].Requests["GET"] != 4 || s.Instances[0].Error != "" {
		t.Fatalf("sample %+v", s)
	}
	if !strings.Contains(s.Instances[1].Error, "HTTP 403") || !strings.Contains(s.Instances[1].Error, "non-resource URL /metrics") {
		t.Errorf("forbidden instance: %q", s.Instances[1].Error)
	}
	if !strings.Contains(s.Instances[2].Error, "no answer") {
		t.Errorf("instance down: %q", s.Instances[2].Error)
	}
	tr := Compare(nil, s, widgets)
	if tr.Reachable != 1 || tr.Total() != 5 || len(tr.Notes) != 2 {
		t.Errorf("traffic %+v", tr)
	}
}

func sample(at int64, mark string, ins ...InstanceCounts) Sample {
	return Sample{Time: time.Unix(at, 0), Mark: mark, Instances: ins}
}

func counts(addr string, start float64, get, list float64) InstanceCounts {
	return InstanceCounts{Address: addr, StartTime: start, Requests: map[string]float64{"GET": get, "LIST": list}}
}

func TestCompare(t *testing.T) {
	base := sample(1000, MarkFlip, counts("a", 10, 5, 1), counts("b", 10, 7, 0), InstanceCounts{Address: "d", Error: "no answer"})
	for _, tc := range []struct {
		name  string
		now   Sample
		want  string
		total float64
		notes []string
	}{
		{"no traffic", sample(2000, "", counts("a", 10, 5, 1), counts("b", 10, 7, 0)), "none", 0, nil},
		{"requests on both instances", sample(2000, "", counts("a", 10, 8, 1), counts("b", 10, 7, 2)), "GET 3, LIST 2", 5, nil},
		{"a restarted instance counts from its start", sample(2000, "", counts("a", 1500, 1, 0), counts("b", 10, 7, 0)), "GET 1", 1, []string{"a restarted at"}},
		{"an instance new since the baseline counts from its start", sample(2000, "", counts("a", 10, 5, 1), counts("c", 1800, 2, 0)), "GET 2", 2, []string{"c was not counted at the baseline"}},
		{"an instance unreadable at the baseline counts from its start", sample(2000, "", counts("d", 10, 4, 0)), "GET 4", 4, []string{"d was not counted at the baseline"}},
		{"an unreachable instance is named", sample(2000, "", counts("a", 10, 5, 1), InstanceCounts{Address: "b", Error: "no answer: refused"}), "none", 0, []string{"b not counted: no answer"}},
		{"open watches count", sample(2000, "", InstanceCounts{Address: "a", StartTime: 10, Requests: map[string]float64{"GET": 5, "LIST": 1}, Watches: 2}), "2 open watches", 2, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := Compare(&base, tc.now, widgets)
			if tr.Counts() != tc.want || tr.Total() != tc.total || len(tr.Notes) != len(tc.notes) {
				t.Fatalf("counts %q total %v notes %q; want %q %v %q", tr.Counts(), tr.Total(), tr.Notes, tc.want, tc.total, tc.notes)
			}
			for i, n := range tc.notes {
				if !strings.Contains(tr.Notes[i], n) {
					t.Errorf("note %q, want %q", tr.Notes[i], n)
				}
			}
			if s := tr.String(); !strings.Contains(s, "widgets.widgetry.io/v1alpha1 requests since 1970-01-01T00:16:40Z (16m40s ago): "+tc.want) {
				t.Errorf("report %q", s)
			}
		})
	}
}

func TestBaseline(t *testing.T) {
	day := int64(24 * 3600)
	w := 24 * time.Hour
	now := time.Unix(10*day, 0)
	if Baseline(nil, MarkFlip, now, w) != nil {
		t.Error("a baseline out of no samples")
	}
	for _, tc := range []struct {
		name    string
		samples []Sample
		mark    string
		want    int64
	}{
		{"the flip an hour ago: since the flip", []Sample{sample(10*day-3600, MarkFlip)}, MarkFlip, 10*day - 3600},
		{"the flip a week ago, a check 2 days ago: since that check", []Sample{sample(3*day, MarkFlip), sample(8*day, ""), sample(9*day+1, "")}, MarkFlip, 8 * day},
		{"the flip a week ago, only recent checks: since the flip", []Sample{sample(3*day, MarkFlip), sample(9*day+1, "")}, MarkFlip, 3 * day},
		{"samples before the milestone do not count", []Sample{sample(1*day, ""), sample(9*day+7200, MarkFlip)}, MarkFlip, 9*day + 7200},
		{"the newest milestone counts", []Sample{sample(1*day, MarkFlip), sample(5*day, MarkFlip), sample(9*day+1, "")}, MarkFlip, 5 * day},
		{"remove looks from unserve on", []Sample{sample(1*day, MarkFlip), sample(2*day, ""), sample(9*day+3600, MarkUnserve)}, MarkUnserve, 9*day + 3600},
		{"no milestone: the oldest sample", []Sample{sample(9*day+60, ""), sample(9*day+30, "")}, MarkFlip, 9*day + 30},
		{"a check exactly one window ago counts", []Sample{sample(3*day, MarkFlip), sample(9*day, "")}, MarkFlip, 9 * day},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := Baseline(tc.samples, tc.mark, now, w)
			if b == nil || b.Time.Unix() != tc.want {
				t.Errorf("baseline %+v, want the sample at %d", b, tc.want)
			}
		})
	}
}

// TestPrune: the newest sample of each mark stays; an older one stays as an ordinary sample
// (a check may still compare with it); ordinary samples beyond the cap go, oldest first.
func TestPrune(t *testing.T) {
	var samples []Sample
	samples = append(samples, sample(1, MarkFlip), sample(2, MarkFlip), sample(3, MarkUnserve), sample(4, MarkUnserve))
	for i := range keptSamples + 10 {
		samples = append(samples, sample(int64(10+i), ""))
	}
	out := prune(samples)
	if len(out) != keptSamples+2 || out[0].Time.Unix() != 2 || out[0].Mark != MarkFlip || out[1].Time.Unix() != 4 || out[1].Mark != MarkUnserve || out[2].Time.Unix() != 20 {
		t.Errorf("pruned to %d samples starting %v %v %v", len(out), out[0], out[1], out[2])
	}
	few := prune([]Sample{sample(1, MarkFlip), sample(5, MarkUnserve), sample(6, ""), sample(7, MarkUnserve)})
	if len(few) != 4 || few[1].Mark != "" || few[3].Mark != MarkUnserve {
		t.Errorf("an older sample of a mark must stay as an ordinary one: %+v", few)
	}
	if b := Baseline(few, MarkFlip, time.Unix(9, 0), 3*time.Second); b == nil || b.Time.Unix() != 6 {
		t.Errorf("baseline %+v, want the sample at 6", b)
	}
}
