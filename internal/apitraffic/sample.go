// Package apitraffic answers "does anyone still use this version?" from the kube-apiservers'
// own request metrics: the preflight of unserve and remove refuses while requests for the old
// version were served within a window, naming the counts by verb.
//
// Every kube-apiserver instance counts the requests it served in apiserver_request_total (by
// group, version, resource, verb and code) and its open watches in
// apiserver_longrunning_requests, from its own start. Requests for a version the CRD does not
// serve are answered 404 without being counted under that version: once a version is
// unserved, only the audit log still shows who asks for it. A count alone says
// nothing about when, so samples are kept (Ledger, a ConfigMap): the traffic within a window
// is the difference between now and the newest sample taken at least the window ago. A
// restarted instance lost its counts: everything it counts now is recent, what it served
// before the restart is unknown, and the report says so.
//
// Our own tooling reads through every served version (verify, backup, the restore drill,
// status, the preflights' probes): each run counts its own requests at the transport
// (OwnCounter) and records them in the ledger, and the check subtracts the records that lie
// wholly inside its window (Traffic.ExcludeOwn), so that following the runbooks never
// restarts the window. The other clients are not named: the apiserver's metrics do not carry
// them (its audit log does, where one is kept: AuditClients).
//
// Watches alone do not show a client: kube-controller-manager's garbage collector and
// resource-quota informers keep watching every version they once preferred until it stops
// being served (seen on the real node: one watch of v1alpha1 open through the whole walk),
// and an informer that cannot be stopped renews its watch every few minutes. Traffic.Calls
// counts the rest: reads and writes, which only a client of the version makes.
package apitraffic

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Resource is what is counted: one version of one resource.
type Resource struct {
	Group, Version, Resource string
}

func (r Resource) String() string { return r.Resource + "." + r.Group + "/" + r.Version }

// InstanceCounts is what one kube-apiserver instance reported.
type InstanceCounts struct {
	Address string `json:"address"`
	// StartTime is the instance's process_start_time_seconds: a later one is a restart.
	StartTime float64 `json:"startTime,omitempty"`
	// Requests are apiserver_request_total for the resource, summed by verb.
	Requests map[string]float64 `json:"requests,omitempty"`
	// Watches is the number of watches of the resource open now.
	Watches float64 `json:"watches,omitempty"`
	// Error says why the instance could not be read.
	Error string `json:"error,omitempty"`
}

// Sample is what every instance reported at one time.
type Sample struct {
	Time time.Time `json:"time"`
	// Mark names a milestone the window of a later check starts from (MarkFlip, MarkUnserve),
	// empty for other samples.
	Mark      string           `json:"mark,omitempty"`
	Instances []InstanceCounts `json:"instances"`
}

// Milestones of the staged upgrade that start a window.
const (
	// MarkFlip: taken by the preflight of flip-storage. unserve looks at the traffic since.
	MarkFlip = "flip-storage"
	// MarkUnserve: taken by the preflight of unserve that let it through. remove looks at the
	// traffic since.
	MarkUnserve = "unserve"
)

// maxMetricsBytes bounds one instance's /metrics answer (a large cluster's is tens of MiB).
const maxMetricsBytes = 256 << 20

// Read asks every instance at addrs for its /metrics, at once, through hc (its credentials
// need get on the non-resource URL /metrics), and returns the counts for r.
func Read(ctx context.Context, hc *http.Client, addrs []string, r Resource, now time.Time) Sample {
	s := Sample{Time: now, Instances: make([]InstanceCounts, len(addrs))}
	var wg sync.WaitGroup
	for i, a := range addrs {
		wg.Go(func() { s.Instances[i] = readInstance(ctx, hc, a, r) })
	}
	wg.Wait()
	return s
}

func readInstance(ctx context.Context, hc *http.Client, addr string, r Resource) InstanceCounts {
	in := InstanceCounts{Address: addr}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/metrics", nil)
	if err != nil {
		in.Error = err.Error()
		return in
	}
	resp, err := hc.Do(req)
	if err != nil {
		in.Error = "no answer: " + err.Error()
		return in
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		in.Error = fmt.Sprintf("GET /metrics: HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(body)))
		if resp.StatusCode == http.StatusForbidden {
			in.Error += " (the caller needs get on the non-resource URL /metrics)"
		}
		return in
	}
	if err := in.parse(io.LimitReader(resp.Body, maxMetricsBytes), r); err != nil {
		in.Error = "GET /metrics: " + err.Error()
	}
	return in
}

// Metric names read from each instance.
const (
	requestTotal     = "apiserver_request_total"
	longRunning      = "apiserver_longrunning_requests"
	processStartTime = "process_start_time_seconds"
)

// parse reads the three metrics from a Prometheus text exposition. An apiserver exposes
// thousands of series: only the lines of these metrics are handed to the parser.
func (in *InstanceCounts) parse(body io.Reader, r Resource) error {
	var kept strings.Builder
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name := strings.TrimPrefix(strings.TrimPrefix(line, "# TYPE "), "# HELP ")
		if i := strings.IndexAny(name, "{ "); i >= 0 {
			name = name[:i]
		}
		if name == requestTotal || name == longRunning || name == processStartTime {
			kept.WriteString(line)
			kept.WriteByte('\n')
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(kept.String()))
	if err != nil {
		return fmt.Errorf("not a Prometheus text exposition: %w", err)
	}
	if families[requestTotal] == nil {
		return fmt.Errorf("no %s: not a kube-apiserver's metrics", requestTotal)
	}
	in.Requests = map[string]float64{}
	for _, m := range families[requestTotal].GetMetric() {
		l := labels(m.GetLabel())
		if l["group"] == r.Group && l["version"] == r.Version && l["resource"] == r.Resource {
			in.Requests[l["verb"]] += m.GetCounter().GetValue()
		}
	}
	if f := families[longRunning]; f != nil {
		for _, m := range f.GetMetric() {
			l := labels(m.GetLabel())
			if l["group"] == r.Group && l["version"] == r.Version && l["resource"] == r.Resource && l["verb"] == "WATCH" {
				in.Watches += m.GetGauge().GetValue()
			}
		}
	}
	if f := families[processStartTime]; f != nil && len(f.GetMetric()) > 0 {
		in.StartTime = f.GetMetric()[0].GetGauge().GetValue()
	}
	return nil
}

func labels[L interface {
	GetName() string
	GetValue() string
}](pairs []L) map[string]string {
	m := make(map[string]string, len(pairs))
	for _, p := range pairs {
		m[p.GetName()] = p.GetValue()
	}
	return m
}

// Traffic is what the instances served for the resource between a baseline and a sample.
type Traffic struct {
	Resource Resource
	// Since is the baseline's time (zero: no baseline, Reachable instances report everything
	// since their start).
	Since, Until time.Time
	// ByVerb are the requests served, by verb.
	ByVerb map[string]float64
	// Watches are the watches open at Until.
	Watches float64
	// Reachable counts the instances read at Until, Unreachable those that could not be;
	// Notes say what was not counted (unreachable instances, restarts, instances new since the
	// baseline).
	Reachable, Unreachable int
	Notes                  []string
	// Own are our own requests (OwnRecord) subtracted from ByVerb, by verb, and OwnClients the
	// tools that sent them.
	Own        map[string]float64
	OwnClients []string
	// countedFrom is the latest time from which every reachable instance counted without a
	// gap: the baseline, or a later start of an instance that restarted or is new since.
	countedFrom time.Time
}

// Calls is the number of requests other than watches: reads and writes, which only a client
// of the version makes.
func (t Traffic) Calls() float64 {
	n := 0.0
	for verb, v := range t.ByVerb {
		if verb != "WATCH" {
			n += v
		}
	}
	return n
}

// Total is the number of requests plus the open watches.
func (t Traffic) Total() float64 {
	n := t.Watches
	for _, v := range t.ByVerb {
		n += v
	}
	return n
}

// Counts says what was served, by verb, e.g. "GET 3, LIST 1, 2 open watches".
func (t Traffic) Counts() string {
	var parts []string
	for _, verb := range slices.Sorted(maps.Keys(t.ByVerb)) {
		if n := t.ByVerb[verb]; n > 0 {
			parts = append(parts, verb+" "+strconv.FormatFloat(n, 'f', -1, 64))
		}
	}
	if t.Watches > 0 {
		parts = append(parts, strconv.FormatFloat(t.Watches, 'f', -1, 64)+" open watches")
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// ownCounts says which of our own requests were not counted, e.g. "GET 3, LIST 1 by
// widgetctl verify".
func (t Traffic) ownCounts() string {
	var parts []string
	for _, verb := range slices.Sorted(maps.Keys(t.Own)) {
		parts = append(parts, verb+" "+strconv.FormatFloat(t.Own[verb], 'f', -1, 64))
	}
	return strings.Join(parts, ", ") + " by " + strings.Join(t.OwnClients, ", ")
}

// ExcludeOwn subtracts our own requests (records of t's version lying wholly within the window
// every reachable instance counted without a gap) from ByVerb. A record that straddles the
// window's start, or a restart, stays counted: it may have been served before the baseline,
// and subtracting it could hide another client's request.
func (t *Traffic) ExcludeOwn(own []OwnRecord) {
	if t.Reachable == 0 {
		return
	}
	excluded := map[string]float64{}
	clients := map[string]bool{}
	for _, r := range own {
		if r.Version != t.Resource.Version || !r.From.After(t.countedFrom) || r.To.After(t.Until) {
			continue
		}
		for verb, n := range r.Requests {
			excluded[verb] += n
		}
		clients[r.Client] = true
	}
	if len(excluded) == 0 {
		return
	}
	t.Own, t.OwnClients = excluded, slices.Sorted(maps.Keys(clients))
	var short []string
	for verb, n := range excluded {
		have := t.ByVerb[verb]
		if n > have {
			short = append(short, fmt.Sprintf("%s %s of %s", verb, strconv.FormatFloat(have, 'f', -1, 64), strconv.FormatFloat(n, 'f', -1, 64)))
			n = have
		}
		t.ByVerb[verb] = have - n
	}
	if len(short) > 0 {
		slices.Sort(short)
		t.Notes = append(t.Notes, "the instances counted fewer of our own requests than we sent ("+strings.Join(short, ", ")+"): an instance not asked, or requests answered by something else")
	}
}

// String is the whole report: counts, window, and what could not be counted.
func (t Traffic) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s requests", t.Resource)
	if !t.Since.IsZero() {
		fmt.Fprintf(&b, " since %s (%s ago)", t.Since.UTC().Format(time.RFC3339), t.Until.Sub(t.Since).Round(time.Second))
	}
	fmt.Fprintf(&b, ": %s, counted by %d kube-apiserver instance(s)", t.Counts(), t.Reachable)
	if len(t.Own) > 0 {
		fmt.Fprintf(&b, "; our own requests not counted: %s", t.ownCounts())
	}
	if len(t.Notes) > 0 {
		fmt.Fprintf(&b, " (%s)", strings.Join(t.Notes, "; "))
	}
	return b.String()
}

// Compare returns the traffic between base and now, instance by instance. With base nil,
// every count since each instance's start is reported.
func Compare(base *Sample, now Sample, r Resource) Traffic {
	t := Traffic{Resource: r, Until: now.Time, ByVerb: map[string]float64{}}
	before := map[string]InstanceCounts{}
	if base != nil {
		t.Since, t.countedFrom = base.Time, base.Time
		for _, in := range base.Instances {
			before[in.Address] = in
		}
	}
	for _, in := range now.Instances {
		if in.Error != "" {
			t.Unreachable++
			t.Notes = append(t.Notes, fmt.Sprintf("%s not counted: %s", in.Address, in.Error))
			continue
		}
		t.Reachable++
		t.Watches += in.Watches
		old, known := before[in.Address]
		// The start rounded up: a request of ours in its first second may have met the
		// instance before it restarted.
		if start := time.Unix(int64(math.Ceil(in.StartTime)), 0); start.After(t.countedFrom) && (base == nil || !known || in.StartTime != old.StartTime) {
			t.countedFrom = start
		}
		switch {
		case base == nil:
		case !known || old.Error != "":
			t.Notes = append(t.Notes, fmt.Sprintf("%s was not counted at the baseline: everything since its start counts", in.Address))
			old = InstanceCounts{}
		case in.StartTime != old.StartTime:
			t.Notes = append(t.Notes, fmt.Sprintf("%s restarted at %s: what it served between the baseline and its restart is unknown",
				in.Address, time.Unix(int64(in.StartTime), 0).UTC().Format(time.RFC3339)))
			old = InstanceCounts{}
		}
		for verb, n := range in.Requests {
			if d := n - old.Requests[verb]; d > 0 {
				t.ByVerb[verb] += d
			}
		}
	}
	return t
}

// Baseline picks the sample a check at now compares with: among the samples taken since the
// newest one marked mark (itself included), the newest taken at least window before now; if
// none is that old, the marked one (the window is then "since the milestone"). Without a
// sample marked mark, the oldest sample; nil without any.
func Baseline(samples []Sample, mark string, now time.Time, window time.Duration) *Sample {
	if len(samples) == 0 {
		return nil
	}
	sorted := slices.SortedFunc(slices.Values(samples), func(a, b Sample) int { return a.Time.Compare(b.Time) })
	start := 0
	for i, s := range sorted {
		if mark != "" && s.Mark == mark {
			start = i
		}
	}
	base := &sorted[start]
	for i := start; i < len(sorted); i++ {
		if !sorted[i].Time.After(now.Add(-window)) {
			base = &sorted[i]
		}
	}
	return base
}
