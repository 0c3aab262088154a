//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/releasestatus"
	"github.com/widgetry/widget-operator/internal/runbooks"
	"github.com/widgetry/widget-operator/internal/testenv/cluster"
)

// laptopStatus runs `kubectl widget status -o json` (widgetctl as kubectl's plugin) on the
// laptop with extra flags, and decodes the report; it fails the test unless the exit code is
// want (any report, 0 or 1, when want is negative).
func laptopStatus(t *testing.T, l *cluster.Laptop, want int, flags ...string) *releasestatus.Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, errOut, code, err := l.Run(ctx, "kubectl", append([]string{"widget", "status", "-o", "json"}, flags...)...)
	if err != nil || (want >= 0 && code != want) || (want < 0 && code > 1) {
		t.Fatalf("kubectl widget status %v: exit %d (want %d), %v\nstdout:\n%s\nstderr:\n%s", flags, code, want, err, out, errOut)
	}
	r := &releasestatus.Report{}
	if err := json.Unmarshal([]byte(out), r); err != nil {
		t.Fatalf("kubectl widget status: not a report: %v\n%s", err, out)
	}
	return r
}

// healthy checks a report of a release that works: the revision and stage as installed,
// Ready Certificates, every replica serving a certificate every caBundle trusts, a leader,
// every conversion check passed and no cause.
func healthy(t *testing.T, r *releasestatus.Report, namespace string, revision int, stage crd.Stage) {
	t.Helper()
	if r.Namespace != namespace || r.Release == nil || r.Release.Name != release || r.Release.Revision != revision || r.Release.Status != "deployed" {
		t.Fatalf("status: namespace %q release %+v (%s), want %s/%s revision %d deployed", r.Namespace, r.Release, r.ReleaseError, namespace, release, revision)
	}
	if r.Stage.Chart != string(stage) || r.Stage.Cluster != string(stage) || r.Stage.Drift != "" {
		t.Fatalf("status: stage %+v, want %s in chart and cluster", r.Stage, stage)
	}
	serving := 0
	for _, c := range r.Certificates {
		if c.Ready != "True" || c.NotAfter == nil || c.RenewalTime == nil || c.RenewOverdue {
			t.Fatalf("status: Certificate %+v, want Ready with notAfter and renewal time", c)
		}
		if c.Serving {
			serving++
		}
	}
	if serving != 1 || len(r.CABundles) != 3 {
		t.Fatalf("status: %d serving Certificates and caBundles %+v, want 1 and 3 (CRD, mutating, validating)", serving, r.CABundles)
	}
	// Each plane's replicas: the webhook plane's serve a trusted, current certificate; one of
	// the controller plane's leads.
	leaders, planes := 0, map[string]int{}
	for _, rep := range r.Replicas {
		planes[rep.Plane]++
		switch {
		case !rep.Ready:
			t.Fatalf("status: replica %+v not Ready", rep)
		case rep.Plane == "webhook" && (rep.Serving == nil || len(rep.Serving.Untrusted) > 0 || rep.Serving.OlderThanCertificate):
			t.Fatalf("status: replica %+v (serving %+v), want serving a trusted, current certificate", rep, rep.Serving)
		case rep.Plane == "controller" && (rep.Serving != nil || rep.ServingError != ""):
			t.Fatalf("status: controller replica %+v was asked for a certificate it does not serve", rep)
		}
		if rep.Leader {
			if rep.Plane != "controller" {
				t.Fatalf("status: replica %+v of the %s plane leads", rep, rep.Plane)
			}
			leaders++
		}
	}
	if planes["webhook"] != 2 || planes["controller"] != 2 || leaders != 1 || r.Leader == nil || r.Leader.Expired {
		t.Fatalf("status: replicas by plane %v, %d leaders, lease %+v; want 2 of each, 1 leader and a live lease", planes, leaders, r.Leader)
	}
	if len(r.Conversion) == 0 {
		t.Fatal("status: no conversion check ran")
	}
	for _, c := range r.Conversion {
		if !c.OK {
			t.Fatalf("status: conversion check %q failed: %s", c.Check, c.Error)
		}
	}
	if len(r.Causes) != 0 || r.Paused != nil {
		t.Fatalf("status: causes %+v, paused %v; want none", r.Causes, r.Paused)
	}
}

// TestOnCallFromALaptop runs widgetctl the way on call does: as kubectl's plugin, as a user
// other than root, outside the node's network namespace, with only a kubeconfig (the
// apiserver relayed to the host's loopback; no cluster DNS, no route to pods or Services).
// It reads a release installed by Helm 3, then the same release upgraded by Helm 4, probes the
// conversion webhook through the apiserver, honours kubectl's flags, and names the cause of an
// outage.
func TestOnCallFromALaptop(t *testing.T) {
	c := certManagedCluster(t)
	const ns = "oncall"
	restrictedNamespace(t, c, ns)
	chart := filepath.Join(c.Root, "charts", release)
	helm := func(bin string, args ...string) string {
		return c.Run(t, filepath.Join(c.Bin, bin), append(args, "-n", ns)...)
	}
	helm("helm3", "install", release, chart, "--set", "image.tag=dev", "--wait", "--timeout", "5m")
	t.Cleanup(func() { uninstallAcceptingTheOutage(t, c, "helm4", ns) }) // it ends at add-version
	l := c.Laptop(t, "widgetctl", "kubectl", "helm4:helm")

	// No -n: the release namespace comes from the CRD (the kubeconfig's is "default").
	healthy(t, laptopStatus(t, l, 0), ns, 1, crd.StageInitial)
	t.Logf("Helm 3's release read by the Helm 4 SDK from the laptop: revision 1, stage initial, 2 replicas trusted")

	helm("helm4", "upgrade", release, chart, "--reset-then-reuse-values", "--set", "apiUpgrade.stage=add-version", "--wait", "--timeout", "10m")
	r := laptopStatus(t, l, 0)
	healthy(t, r, ns, 2, crd.StageAddVersion)
	if r.Release.Source != releasestatus.SourceReleaseInfo {
		t.Fatalf("status read the release from %q, want %q (no Secret read)", r.Release.Source, releasestatus.SourceReleaseInfo)
	}
	// Helm's own records (Secrets, opt-in) keep every hook's last run, the succeeded ones too.
	r = laptopStatus(t, l, 0, "--helm-storage")
	healthy(t, r, ns, 2, crd.StageAddVersion)
	hooks := 0
	for _, h := range r.Release.Hooks {
		if h.Phase == "Succeeded" {
			hooks++
		}
	}
	if hooks == 0 {
		t.Fatalf("status: hooks %+v, want the upgrade's hooks Succeeded", r.Release.Hooks)
	}
	t.Logf("Helm 4's revision 2 read: stage add-version, %d hooks succeeded", hooks)
	runRunbookCommands(t, l, c.Root, ns)

	// The upgrade's own probe goes through the apiserver's service proxy.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, errOut, code, err := l.Run(ctx, "widgetctl", "upgrade", "status")
	if err != nil || code != 0 || !strings.Contains(out, "round trip through the apiserver's service proxy") {
		t.Fatalf("widgetctl upgrade status from the laptop: exit %d, %v\n%s\n%s", code, err, out, errOut)
	}

	// kubectl's flags: -n names another namespace (no release there), --as another user.
	if r := laptopStatus(t, l, 1, "-n", "default"); r.Namespace != "default" || r.ReleaseError == "" {
		t.Fatalf("status -n default: namespace %q, release error %q; want default and no release", r.Namespace, r.ReleaseError)
	}
	_, errOut, code, err = l.Run(ctx, "kubectl", "widget", "status", "--as", "system:serviceaccount:oncall:nobody", "--request-timeout", "20s")
	if err != nil || code != 1 || !strings.Contains(errOut, "forbidden") || !strings.Contains(errOut, "pass -n") {
		t.Fatalf("status --as an account without rights: exit %d, %v; want 1, forbidden and what to do\n%s", code, err, errOut)
	}

	// An outage: no webhook pod (the controller plane running). status names it, with the
	// runbook.
	c.Kubectl(t, "-n", ns, "scale", "deployment/"+release+"-webhook", "--replicas=0")
	c.Kubectl(t, "-n", ns, "wait", "--for=delete", "pod", "-l", "app.kubernetes.io/component=webhook", "--timeout=3m")
	r = laptopStatus(t, l, 1)
	if len(r.Causes) == 0 || r.Causes[0].Runbook != "runbooks/alerts/WidgetWebhookDown.md" {
		t.Fatalf("status with no webhook pod: causes %+v, want WidgetWebhookDown first", r.Causes)
	}
	t.Logf("no webhook pod: %q (%s)", r.Causes[0].Summary, r.Causes[0].Runbook)
	c.Kubectl(t, "-n", ns, "scale", "deployment/"+release+"-webhook", "--replicas=2")
	c.Kubectl(t, "-n", ns, "rollout", "status", "deployment/"+release+"-webhook", "--timeout=5m")
}

// readOnlyCommand matches the runbook commands that only read: kubectl's reading verbs, helm's
// history and values, widgetctl's status, plan, verify and census.
var readOnlyCommand = regexp.MustCompile(`^(kubectl( -n \$NS)? (get|describe|logs|auth can-i|widget status)\b|helm -n \$NS (history|list|status|get values)\b|widgetctl (status|upgrade status|upgrade plan|verify|census)\b)`)

// readOnlyAssignment matches the variable assignments such commands need: literals and reads.
var readOnlyAssignment = regexp.MustCompile(`^[A-Z_]+=([A-Za-z0-9/._-]+|\$\((kubectl get|helm -n \$NS list) [^)]*\)[^;&]*)$`)

// runRunbookCommands runs, on the laptop, every read-only command of the runbooks as written,
// with NS set to the release namespace and the variables its block assigns before it. A
// command fails when it writes an error or exits non-zero, except a grep that matched nothing
// (exit 1, no error written): on a healthy release there may be nothing to find.
func runRunbookCommands(t *testing.T, l *cluster.Laptop, root, namespace string) {
	t.Helper()
	lines, err := runbooks.Lines(filepath.Join(root, "runbooks"))
	if err != nil {
		t.Fatal(err)
	}
	ran := map[string]bool{}
	for _, line := range lines {
		cmd := line.Command
		// --previous needs a restarted container; cert-manager runs beside the node, not in it.
		if !readOnlyCommand.MatchString(cmd) || runbooks.Placeholder.MatchString(cmd) || strings.Contains(cmd, "--previous") ||
			strings.Contains(cmd, "cert-manager logs") || ran[line.File+cmd] {
			continue
		}
		var prelude []string
		for _, a := range line.Assignments {
			if strings.HasPrefix(a, "NS=") {
				continue
			}
			if !readOnlyAssignment.MatchString(a) {
				prelude = nil
				cmd = ""
				break
			}
			prelude = append(prelude, a)
		}
		if cmd == "" {
			continue
		}
		ran[line.File+cmd] = true
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		script := strings.Join(append([]string{"set -o pipefail", "NS=" + namespace}, append(prelude, cmd)...), "\n")
		out, errOut, code, err := l.Run(ctx, "bash", "-c", script)
		cancel()
		grepMissed := code == 1 && strings.Contains(cmd, "| grep") && strings.TrimSpace(errOut) == ""
		if err != nil || (code != 0 && !grepMissed) || strings.Contains(strings.ToLower(errOut), "error") {
			t.Errorf("runbooks/%s: %s\nexit %d %v\nstdout:\n%s\nstderr:\n%s", line.File, cmd, code, err, out, errOut)
		}
	}
	if len(ran) < 30 {
		t.Errorf("ran only %d read-only runbook commands; the patterns no longer match the runbooks", len(ran))
	}
	t.Logf("ran %d read-only runbook commands on the laptop (as nobody, outside the node's network, kubeconfig only)", len(ran))
}
