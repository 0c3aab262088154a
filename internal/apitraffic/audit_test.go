package apitraffic

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestAuditClients: requests for the resource version since a time, once each (its
// ResponseComplete event), by user and user agent, busiest first.
func TestAuditClients(t *testing.T) {
	line := func(stage, verb, user, agent, group, version, resource, at string) string {
		return `{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","stage":"` + stage + `","verb":"` + verb +
			`","user":{"username":"` + user + `"},"userAgent":"` + agent + `","objectRef":{"resource":"` + resource +
			`","namespace":"shop","name":"w","apiGroup":"` + group + `","apiVersion":"` + version + `"},"requestReceivedTimestamp":"` + at + `"}`
	}
	log := strings.Join([]string{
		line("RequestReceived", "get", "app", "app/v2", "widgetry.io", "v1alpha1", "widgets", "2026-12-01T10:00:00Z"),
		line("ResponseComplete", "get", "app", "app/v2", "widgetry.io", "v1alpha1", "widgets", "2026-12-01T10:00:00Z"),
		line("ResponseComplete", "list", "app", "app/v2", "widgetry.io", "v1alpha1", "widgets", "2026-12-01T10:00:01Z"),
		line("ResponseComplete", "get", "app", "app/v2", "widgetry.io", "v1alpha1", "widgets", "2026-12-01T10:00:02Z"),
		line("ResponseComplete", "update", "ci", "kubectl/v1.37", "widgetry.io", "v1alpha1", "widgets", "2026-12-01T10:00:03Z"),
		line("ResponseComplete", "get", "old", "kubectl/v1.30", "widgetry.io", "v1alpha1", "widgets", "2026-12-01T09:00:00Z"),
		line("ResponseComplete", "get", "new", "app/v3", "widgetry.io", "v1", "widgets", "2026-12-01T10:00:03Z"),
		line("ResponseComplete", "get", "other", "x", "apps", "v1alpha1", "widgets", "2026-12-01T10:00:03Z"),
		`not json`,
		`{"kind":"Event","stage":"ResponseComplete","verb":"get","requestURI":"/healthz"}`,
	}, "\n")
	path := filepath.Join(t.TempDir(), "audit.log")
	if err := os.WriteFile(path, []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := AuditClients(path, widgets, time.Date(2026, 12, 1, 9, 30, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.String(), "app (app/v2) get 2, list 1; ci (kubectl/v1.37) update 1"; got != want {
		t.Errorf("clients %q, want %q", got, want)
	}
	if _, err := AuditClients(filepath.Join(t.TempDir(), "none.log"), widgets, time.Time{}); err == nil {
		t.Error("a missing audit log: no error")
	}
}
