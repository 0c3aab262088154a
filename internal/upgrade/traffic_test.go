package upgrade

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/widgetry/widget-operator/internal/apitraffic"
	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/scheme"
)

// TestOldVersionTrafficDecision: reads and writes through v1alpha1 in the window refuse;
// watches alone (kube-controller-manager keeps one on a version it once preferred) pass with a
// warning, unless the audit log names a watcher other than kube-controller-manager; an
// instance that cannot be asked refuses, unless overridden with a reason. The
// apiserver is a TLS server exposing the counts; the ledger a fake client (the walk in
// walk_test.go runs the same against a real apiserver).
func TestOldVersionTrafficDecision(t *testing.T) {
	var get, watchesDone, watchesOpen atomic.Int64
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, `# TYPE apiserver_request_total counter
apiserver_request_total{group="widgetry.io",version="v1alpha1",resource="widgets",verb="GET",code="200"} %d
apiserver_request_total{group="widgetry.io",version="v1alpha1",resource="widgets",verb="WATCH",code="200"} %d
# TYPE apiserver_longrunning_requests gauge
apiserver_longrunning_requests{group="widgetry.io",version="v1alpha1",resource="widgets",verb="WATCH"} %d
# TYPE process_start_time_seconds gauge
process_start_time_seconds 1
`, get.Load(), watchesDone.Load(), watchesOpen.Load())
	}))
	defer srv.Close()
	clock := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	instances := []string{srv.Listener.Addr().String()}
	c := fake.NewClientBuilder().WithScheme(scheme.New()).Build()
	tc := &TrafficCheck{
		Ledger: apitraffic.Ledger{Client: c, Namespace: "widget-system", Name: "ledger"},
		HTTP:   srv.Client(), Window: time.Minute, Now: func() time.Time { return clock },
		Instances: func(context.Context) ([]string, error) { return instances, nil },
	}
	cfg := WidgetConfig()
	live := crd.Widget()
	ctx := context.Background()
	if _, err := recordBaseline(ctx, tc, cfg, live); err != nil {
		t.Fatal(err)
	}
	audit := filepath.Join(t.TempDir(), "audit.log")
	// Audit events of each case come from its own window (see the clock below).
	auditLine := func(user string) string {
		return `{"stage":"ResponseComplete","verb":"watch","user":{"username":"` + user + `"},"userAgent":"a","objectRef":{"resource":"widgets","apiGroup":"widgetry.io","apiVersion":"v1alpha1"},"requestReceivedTimestamp":"TIME"}` + "\n"
	}
	for _, tc2 := range []struct {
		name                      string
		get, watchDone, watchOpen int64
		auditLog                  string
		unreachable               bool
		allowReason               string
		refused, note             string
	}{
		{"nothing", 0, 0, 0, "", false, "", "", ": none"},
		{"watches only", 0, 2, 1, "", false, "", "", "WARNING: watches only: "},
		{"watches only, all by kube-controller-manager", 0, 3, 1, auditLine("system:kube-controller-manager"), false, "", "", "no watcher but kube-controller-manager"},
		{"watches by an old operator", 0, 4, 1, auditLine("system:kube-controller-manager") + auditLine("system:serviceaccount:shop:old-operator"), false, "", "still watched", ""},
		{"a GET", 1, 4, 1, "", false, "", "still in use", ""},
		{"nothing, but an instance cannot be asked", 0, 0, 0, "", true, "", "1 kube-apiserver instance(s) could not be asked", ""},
		{"an instance cannot be asked, overridden with a reason", 0, 0, 0, "", true, "INC-42: the instance is being replaced", "", `overridden ("INC-42`},
	} {
		t.Run(tc2.name, func(t *testing.T) {
			clock = clock.Add(2 * time.Minute) // each case counts since the sample of the one before
			get.Store(get.Load() + tc2.get)
			watchesDone.Store(watchesDone.Load() + tc2.watchDone)
			watchesOpen.Store(tc2.watchOpen)
			instances = []string{srv.Listener.Addr().String()}
			if tc2.unreachable {
				instances = append(instances, "127.0.0.1:1") // nothing listens there
			}
			tc.AllowReason = tc2.allowReason
			tc.AuditLog = ""
			if tc2.auditLog != "" {
				at := clock.Add(-30 * time.Second).Format(time.RFC3339)
				if err := os.WriteFile(audit, []byte(strings.ReplaceAll(tc2.auditLog, "TIME", at)), 0o600); err != nil {
					t.Fatal(err)
				}
				tc.AuditLog = audit
			}
			note, err := oldVersionTraffic(ctx, c, tc, cfg, live, crd.StageUnserve)
			switch {
			case tc2.refused != "" && (err == nil || !strings.Contains(err.Error(), tc2.refused)):
				t.Errorf("got %q, %v; want a refusal saying %q", note, err, tc2.refused)
			case tc2.refused == "" && (err != nil || !strings.Contains(note, tc2.note)):
				t.Errorf("got %q, %v; want a pass saying %q", note, err, tc2.note)
			}
		})
	}
}
