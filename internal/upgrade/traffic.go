package upgrade

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/widgetry/widget-operator/internal/apitraffic"
	"github.com/widgetry/widget-operator/internal/crd"
)

// DefaultTrafficWindow is how far back the traffic check looks, at most: since the milestone
// (the storage flip for unserve, unserve for remove), and no more than a day.
const DefaultTrafficWindow = 24 * time.Hour

// TrafficCheck is how the preflight counts the requests the kube-apiservers served through Old
// (internal/apitraffic): the flip to New's storage records a baseline, and unserve and remove
// are refused while any request through Old was served within the window.
type TrafficCheck struct {
	// Ledger keeps the samples between checks.
	Ledger apitraffic.Ledger
	// HTTP reaches every instance with credentials that may get /metrics.
	HTTP *http.Client
	// Instances returns host:port of every kube-apiserver instance.
	Instances func(ctx context.Context) ([]string, error)
	// Window is the longest the check looks back (DefaultTrafficWindow when zero): the traffic
	// counted is since the newest sample at least Window old, or since the milestone.
	Window time.Duration
	// AllowReason, when set, lets the step through despite traffic, recording the reason and
	// the counts in an event on the CRD.
	AllowReason string
	// AuditLog, when set, is a kube-apiserver audit log readable here: the refusal then names
	// the clients (user and user agent) of the requests through Old.
	AuditLog string
	// Own counts this process's own requests (nil: none are counted): they are written to the
	// Ledger before each sample, and the check subtracts every run's records, so that our own
	// verify, backup, drill and probes never count as a client of Old.
	Own *apitraffic.OwnCounter
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// watchClients names the clients in the audit log that watched Old in t's window, other than
// kube-controller-manager and the controllers it runs; "" when there is none.
func (tc *TrafficCheck) watchClients(t apitraffic.Traffic) string {
	c, err := apitraffic.AuditClients(tc.AuditLog, t.Resource, t.Since)
	if err != nil {
		return "unknown: " + err.Error()
	}
	for k := range c {
		if strings.HasPrefix(k, "system:kube-controller-manager ") || strings.HasPrefix(k, "system:serviceaccount:kube-system:") {
			delete(c, k)
		}
	}
	if len(c) == 0 {
		return ""
	}
	return c.String()
}

// clients names the clients of the traffic t from the audit log, when one is configured.
func (tc *TrafficCheck) clients(t apitraffic.Traffic) string {
	if tc.AuditLog == "" {
		return ""
	}
	c, err := apitraffic.AuditClients(tc.AuditLog, t.Resource, t.Since)
	switch {
	case err != nil:
		return "; clients unknown: " + err.Error()
	case len(c) == 0:
		return "; the audit log " + tc.AuditLog + " names no client (is the resource audited at level Metadata?)"
	}
	return "; clients (audit log): " + c.String()
}

func (tc *TrafficCheck) now() time.Time {
	if tc.Now != nil {
		return tc.Now()
	}
	return time.Now()
}

func (tc *TrafficCheck) window() time.Duration {
	if tc.Window > 0 {
		return tc.Window
	}
	return DefaultTrafficWindow
}

func (tc *TrafficCheck) resource(cfg Config, live *apiextensionsv1.CustomResourceDefinition) apitraffic.Resource {
	return apitraffic.Resource{Group: live.Spec.Group, Version: cfg.Old, Resource: live.Spec.Names.Plural}
}

// sample reads every instance now, once this process's own requests so far are in the ledger.
func (tc *TrafficCheck) sample(ctx context.Context, r apitraffic.Resource) (apitraffic.Sample, error) {
	if err := tc.Ledger.AppendOwn(ctx, tc.Own.Take()); err != nil {
		return apitraffic.Sample{}, err
	}
	addrs, err := tc.Instances(ctx)
	if err != nil {
		return apitraffic.Sample{}, err
	}
	if len(addrs) == 0 {
		return apitraffic.Sample{}, errors.New("no kube-apiserver instance is known (the endpoints of Service default/kubernetes are empty): name them with --apiserver-instances")
	}
	return apitraffic.Read(ctx, tc.HTTP, addrs, r, tc.now()), nil
}

// recordBaseline is the check of the flip to New's storage: it records what every instance has
// served through Old so far, marked as the start of unserve's window. An instance it cannot
// read does not stop the flip (the note says so; unserve's check counts it from its start).
func recordBaseline(ctx context.Context, tc *TrafficCheck, cfg Config, live *apiextensionsv1.CustomResourceDefinition) (string, error) {
	if tc == nil {
		return "", errors.New("no way to count requests was configured")
	}
	r := tc.resource(cfg, live)
	s, err := tc.sample(ctx, r)
	if err != nil {
		return fmt.Sprintf("not recorded: %v; unserve's check will count from each instance's start", err), nil
	}
	s.Mark = apitraffic.MarkFlip
	if err := tc.Ledger.Append(ctx, s); err != nil {
		return "", err
	}
	return "recorded: " + apitraffic.Compare(nil, s, r).String(), nil
}

// windowStart is the milestone the traffic check of a step to stage counts from: the storage
// flip for unserve (and any stage before it), unserve for remove.
func windowStart(stage crd.Stage) string {
	if stage == crd.StageRemove {
		return apitraffic.MarkUnserve
	}
	return apitraffic.MarkFlip
}

// count samples every instance now and compares with the baseline since mark.
func (tc *TrafficCheck) count(ctx context.Context, cfg Config, live *apiextensionsv1.CustomResourceDefinition, mark string) (apitraffic.Sample, *apitraffic.Sample, apitraffic.Traffic, error) {
	r := tc.resource(cfg, live)
	samples, err := tc.Ledger.Load(ctx)
	if err != nil {
		return apitraffic.Sample{}, nil, apitraffic.Traffic{}, err
	}
	now, err := tc.sample(ctx, r)
	if err != nil {
		return apitraffic.Sample{}, nil, apitraffic.Traffic{}, err
	}
	own, err := tc.Ledger.LoadOwn(ctx)
	if err != nil {
		return apitraffic.Sample{}, nil, apitraffic.Traffic{}, err
	}
	base := apitraffic.Baseline(samples, mark, now.Time, tc.window())
	t := apitraffic.Compare(base, now, r)
	t.ExcludeOwn(own)
	return now, base, t, nil
}

// TrafficReport says what the instances served through Old within the window of the stage
// the CRD is at (the window unserve's check would use, and remove's once at unserve or
// later), recording nothing: widgetctl upgrade status shows it.
func TrafficReport(ctx context.Context, tc *TrafficCheck, cfg Config, o *Observation) (string, error) {
	switch {
	case tc == nil:
		return "", errors.New("no way to count requests was configured")
	case o.live == nil:
		return "", errors.New("the CRD is not installed")
	}
	stage := crd.StageUnserve
	if o.Stage == crd.StageUnserve || o.Stage == crd.StageRemove {
		stage = crd.StageRemove
	}
	_, base, t, err := tc.count(ctx, cfg, o.live, windowStart(stage))
	if err != nil {
		return "", err
	}
	if base == nil {
		return t.String() + "; nothing recorded to compare with yet (the storage flip's preflight records it)", nil
	}
	return t.String(), nil
}

// oldVersionTraffic refuses while requests through Old were served since the baseline: the
// newest sample at least the window old, taken since the milestone mark. It records its own
// sample either way (marked MarkUnserve when it lets unserve through), so that a check rerun
// after the window with no traffic in between passes.
func oldVersionTraffic(ctx context.Context, c client.Client, tc *TrafficCheck, cfg Config, live *apiextensionsv1.CustomResourceDefinition, to crd.Stage) (string, error) {
	if tc == nil {
		return "", errors.New("no way to count requests was configured")
	}
	now, base, t, err := tc.count(ctx, cfg, live, windowStart(to))
	if err != nil {
		return "", err
	}
	r := t.Resource
	var problem error
	switch {
	case t.Reachable == 0:
		problem = fmt.Errorf("no kube-apiserver instance could be asked how many %s requests it served: %s; from outside the cluster's network name reachable instances with --apiserver-instances host:port (or run the check in the cluster: the chart's preflight hook does)", r, t)
	case t.Unreachable > 0:
		// What an instance that cannot be asked served is unknown: a client of it alone would
		// lose its version at unserve, and a forged or stale answer must not count as none.
		problem = fmt.Errorf("%d kube-apiserver instance(s) could not be asked how many %s requests they served, so %s cannot be shown unused: %s; make every instance reachable from where the check runs (--apiserver-instances host:port from outside the cluster), or override with a reason (--allow-old-version-traffic=<reason>, the chart's apiUpgrade.oldVersionTraffic.allowReason), recorded as a Warning event on the CRD",
			t.Unreachable, r, cfg.Old, t)
	case base == nil:
		problem = fmt.Errorf("there is no earlier count to compare with (none was recorded at the storage flip); counted now: %s; rerun after %s without %s requests, so the traffic within that window is known", t, tc.window(), cfg.Old)
	case t.Calls() > 0:
		problem = fmt.Errorf("%s is still in use: %s%s; move those clients to %s (the apiserver's audit log names them: --audit-log), then rerun once %s passed without %s requests", cfg.Old, t, tc.clients(t), cfg.New, tc.window(), cfg.Old)
	case t.Total() > 0 && tc.AuditLog != "":
		if watchers := tc.watchClients(t); watchers != "" {
			problem = fmt.Errorf("%s is still watched: %s; clients (audit log) other than kube-controller-manager: %s; move them to %s, then rerun once %s passed", cfg.Old, t, watchers, cfg.New, tc.window())
		}
	}
	passed := problem == nil || tc.AllowReason != ""
	if passed && to == crd.StageUnserve {
		now.Mark = apitraffic.MarkUnserve
	}
	if err := tc.Ledger.Append(ctx, now); err != nil {
		return "", err
	}
	switch {
	case problem == nil && t.Total() > 0 && tc.AuditLog != "":
		return "watches only, and the audit log names no watcher but kube-controller-manager: " + t.String(), nil
	case problem == nil && t.Total() > 0:
		// kube-controller-manager's informers keep a watch of every version they once
		// preferred until it is unserved: watches alone do not show a client.
		return "WARNING: watches only: " + t.String() + "; kube-controller-manager's garbage collector and resource quota keep watching a version they once preferred until it is unserved, so watches alone do not show a client; the audit log does (--audit-log)", nil
	case problem == nil:
		return t.String(), nil
	}
	if tc.AllowReason == "" {
		return "", problem
	}
	note := fmt.Sprintf("overridden (%q): %v", tc.AllowReason, problem)
	if err := recordOverride(ctx, c, live, to, "OldVersionTrafficOverridden", note); err != nil {
		return "", fmt.Errorf("the override of the traffic check could not be recorded, so it is not taken: %w", err)
	}
	return note, nil
}

// recordOverride records an override of a check as a Warning event on the CRD with reason
// (kubectl describe crd shows it; events of a cluster-scoped object live in "default").
func recordOverride(ctx context.Context, c client.Client, live *apiextensionsv1.CustomResourceDefinition, to crd.Stage, reason, note string) error {
	now := metav1.NewTime(time.Now())
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, GenerateName: live.Name + "."},
		InvolvedObject: corev1.ObjectReference{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition",
			Name: live.Name, UID: live.UID, ResourceVersion: live.ResourceVersion},
		Reason: reason, Type: corev1.EventTypeWarning,
		Message: truncate(fmt.Sprintf("stage %s: %s", to, note), 1000), Source: corev1.EventSource{Component: "widgetctl"},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
	return c.Create(ctx, ev)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}
