package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// AuditLog has kube-apiserver write an audit log (JSON lines, level Metadata, stage
// RequestReceived omitted) of the requests for the resources of group ("group" or
// "group/resource"), adding its flags to o, and returns the log's path: tests read who asked
// for what there.
func AuditLog(tb testing.TB, o *Options, resources ...string) string {
	tb.Helper()
	dir := tb.TempDir()
	policy, log := filepath.Join(dir, "audit-policy.yaml"), filepath.Join(dir, "audit.log")
	var b strings.Builder
	b.WriteString("apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n")
	for _, r := range resources {
		group, resource, _ := strings.Cut(r, "/")
		if resource == "" {
			fmt.Fprintf(&b, "  - level: Metadata\n    resources: [{group: %q}]\n", group)
		} else {
			fmt.Fprintf(&b, "  - level: Metadata\n    resources: [{group: %q, resources: [%q]}]\n", group, resource)
		}
	}
	b.WriteString("  - level: None\n")
	if err := os.WriteFile(policy, []byte(b.String()), 0o600); err != nil {
		tb.Fatal(err)
	}
	if o.APIServerFlags == nil {
		o.APIServerFlags = map[string]string{}
	}
	o.APIServerFlags["audit-policy-file"], o.APIServerFlags["audit-log-path"] = policy, log
	return log
}
