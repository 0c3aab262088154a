//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/widgetry/widget-operator/internal/controller"
	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/gatestate"
	"github.com/widgetry/widget-operator/internal/monitoring"
	"github.com/widgetry/widget-operator/internal/releasestatus"
	"github.com/widgetry/widget-operator/internal/scheme"
	"github.com/widgetry/widget-operator/internal/testenv/cluster"
)

// uninstallAcceptingTheOutage uninstalls the release at a stage where uninstall is refused
// (objects may need the conversion webhook that goes with it), as the refusal says: with
// apiUpgrade.allowUnsafeUninstall=true; the CRD is deleted right after.
func uninstallAcceptingTheOutage(t *testing.T, c *cluster.Cluster, helmBin, namespace string) {
	t.Helper()
	helm := func(args ...string) string {
		return c.Run(t, filepath.Join(c.Bin, helmBin), append(args, "-n", namespace)...)
	}
	helm("upgrade", release, filepath.Join(c.Root, "charts", release), "--reset-then-reuse-values", "--set", "apiUpgrade.allowUnsafeUninstall=true", "--no-hooks", "--wait", "--timeout", "5m")
	helm("uninstall", release, "--wait", "--timeout", "5m")
	c.Kubectl(t, "delete", "crd", crd.WidgetName, "--ignore-not-found")
}

// walkRules writes the chart's alert rules for the default release with every `for` dropped:
// the walk proves that each expression fires on the real node's metrics and clears after the
// runbook's fix; how long each waits before firing is promtool's to test.
func walkRules(t *testing.T, dir string) string {
	t.Helper()
	rules, err := monitoring.Rules(monitoring.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for g := range rules.Groups {
		for r := range rules.Groups[g].Rules {
			rules.Groups[g].Rules[r].For = ""
		}
	}
	b, err := yaml.Marshal(rules)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "walk.rules.yaml")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// runbookCommand returns command after checking that the runbook page holds it as written, so
// the walk runs what on call would copy.
func runbookCommand(t *testing.T, root, page, command string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "runbooks", page))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), command) {
		t.Fatalf("runbooks/%s no longer says %q", page, command)
	}
	return command
}

// chartVersionAssignment is the runbooks' CHART_VERSION line (runbooks/README.md).
func chartVersionAssignment(t *testing.T, root string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "runbooks", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "CHART_VERSION=") {
			return line
		}
	}
	t.Fatal("runbooks/README.md sets no CHART_VERSION")
	return ""
}

// TestOutageWalk walks one outage per alert class on the real node: the controller paused, a
// storage migration failed, the serving Certificate not Ready, the webhook pods gone. For each
// it shows the alert firing in Prometheus (which scrapes the manager, the apiserver, the
// kubelet and cert-manager), `kubectl widget status` run from the laptop (as nobody, outside
// the node's network, with a kubeconfig only) naming the cause, and the runbook's own commands,
// run from the laptop, bringing it back: the alert clears and status finds nothing wrong.
func TestOutageWalk(t *testing.T) {
	c := certManagedCluster(t)
	const walkNS = "outage-walk"
	restrictedNamespace(t, c, walkNS)
	c.Kubectl(t, "create", "namespace", apps)
	chart := filepath.Join(c.Root, "charts", release)
	helm3 := func(args ...string) string {
		return c.Run(t, filepath.Join(c.Bin, "helm3"), append(args, "-n", walkNS)...)
	}
	// Helm 3 applies client-side, so the runbooks' `helm upgrade` takes back fields edited
	// with kubectl (a Helm 4 install would need --force-conflicts, as the runbooks say).
	helm3("install", release, chart, "--set", "image.tag=dev", "--set", "apiUpgrade.stage=add-version", "--wait", "--timeout", "5m")
	t.Cleanup(func() { uninstallAcceptingTheOutage(t, c, "helm3", walkNS) })
	k, err := client.New(c.Config, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	// Objects stored as v1alpha1, then the storage flipped: storedVersions [v1alpha1 v1], what
	// the migration has to rewrite.
	for _, name := range []string{"walk-a", "walk-b", "walk-c"} {
		if err := k.Create(context.Background(), newWidget(name)); err != nil {
			t.Fatal(err)
		}
	}
	helm3("upgrade", release, chart, "--reset-then-reuse-values", "--set", "apiUpgrade.stage=flip-storage", "--wait", "--timeout", "10m")

	p := startMonitoring(t, c, walkNS, "rule_files: ['"+walkRules(t, t.TempDir())+"']")
	// On call's helm is Helm 3 here: Helm 4's upgrade, run through the laptop's relay, hung
	// after its pre-upgrade hook (its kstatus watcher never saw the hook finish); not diagnosed.
	l := c.Laptop(t, "widgetctl", "kubectl", "helm3:helm")
	env := strings.Join([]string{"NS=" + walkNS, "CHART=" + l.CopyDir(t, chart, "widget-operator"), chartVersionAssignment(t, c.Root)}, "\n")
	onLaptop := func(command string, want int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		out, errOut, code, err := l.Run(ctx, "bash", "-c", "set -o pipefail\n"+env+"\n"+command)
		if err != nil || code != want {
			t.Fatalf("on the laptop: %s: exit %d (want %d) %v\n%s\n%s", command, code, want, err, out, errOut)
		}
	}
	firing := func(alert string) string { return `ALERTS{alertname="` + alert + `",alertstate="firing"}` }
	walk := func(name, alert, cause string, breakIt, fix func()) {
		t.Helper()
		start := time.Now()
		breakIt()
		p.WaitFor(t, firing(alert), 1, 5*time.Minute)
		fired := time.Since(start).Round(time.Second)
		r := laptopStatus(t, l, 1)
		var named *releasestatus.Cause
		for i := range r.Causes {
			if strings.Contains(r.Causes[i].Summary, cause) {
				named = &r.Causes[i]
				break
			}
		}
		if named == nil {
			t.Fatalf("%s: status names no cause with %q: %+v", name, cause, r.Causes)
		}
		fix()
		p.WaitForNone(t, firing(alert), 5*time.Minute)
		deadline := time.Now().Add(3 * time.Minute)
		for r = laptopStatus(t, l, -1); len(r.Causes) > 0 && time.Now().Before(deadline); r = laptopStatus(t, l, -1) {
			time.Sleep(5 * time.Second)
		}
		if len(r.Causes) > 0 {
			t.Fatalf("%s: after the runbook's fix status still names %+v", name, r.Causes)
		}
		t.Logf("%s: %s fired after %s; status named %q (%s); the runbook's fix cleared both after %s", name, alert, fired, named.Summary, named.Runbook,
			time.Since(start).Round(time.Second))
	}
	healthyAt := laptopStatus(t, l, 0)
	healthy(t, healthyAt, walkNS, 2, crd.StageFlipStorage)

	// First, at flip-storage with objects still stored as v1alpha1: every LIST needs the
	// conversion webhook, so with our pods gone the runbook's break-glass is the way out.
	breakGlassWalk(t, c, k, l, p, walkNS, onLaptop)

	// The marker an interrupted `helm uninstall` leaves (its pre-delete hook creates it, labelled
	// as the manager's own ConfigMaps are).
	walk("controller paused", monitoring.AlertControllerPaused, "the controller is paused",
		func() {
			// Written as the cluster admin running this walk, with the reason the chart's
			// gate-state guard asks of anyone but the hooks' account.
			marker := filepath.Join(t.TempDir(), "paused.yaml")
			if err := os.WriteFile(marker, []byte(fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\n  namespace: %s\n  labels: {%q: %q}\n  annotations: {%q: %q}\n",
				controller.PausedConfigMap, walkNS, controller.ManagedByLabel, controller.ManagedByValue, gatestate.Annotation, "e2e: the marker an interrupted uninstall leaves")), 0o600); err != nil {
				t.Fatal(err)
			}
			c.Kubectl(t, "apply", "-f", marker)
		},
		func() {
			onLaptop(runbookCommand(t, c.Root, "alerts/WidgetControllerPaused.md", "kubectl -n $NS delete configmap widget-operator-paused"), 0)
		})

	// The migrate stage's hook fails: a policy of the cluster (a policy engine's rule, another
	// team's webhook) refuses every Widget update, so each rewrite of the migration fails.
	policy := filepath.Join(c.Root, "internal", "e2e", "testdata", "block-widget-updates.yaml")
	walk("storage migration failed", monitoring.AlertStorageMigrationFailed, "storage migration to v1 failed",
		func() {
			c.Kubectl(t, "apply", "-f", policy)
			t.Cleanup(func() { c.Kubectl(t, "delete", "-f", policy, "--ignore-not-found") })
			// The apiserver loads a new policy asynchronously: wait until it refuses a dry run.
			deadline := time.Now().Add(time.Minute)
			for {
				_, err := c.Command(context.Background(), filepath.Join(c.Bin, "kubectl"), "-n", apps, "label", "widgets.v1.widgetry.io", "walk-a", "probe=1", "--dry-run=server").CombinedOutput()
				if err != nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the policy freezing Widget updates is not enforced after a minute")
				}
				time.Sleep(time.Second)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			out, err := c.Command(ctx, filepath.Join(c.Bin, "helm3"), "upgrade", release, chart, "-n", walkNS, "--reset-then-reuse-values",
				"--set", "apiUpgrade.stage=migrate", "--wait", "--timeout", "10m").CombinedOutput()
			if err == nil {
				t.Fatalf("helm upgrade to migrate passed although every Widget update is refused:\n%s", out)
			}
		},
		func() {
			c.Kubectl(t, "delete", "-f", policy)
			onLaptop(runbookCommand(t, c.Root, "alerts/WidgetStorageMigrationFailed.md",
				"helm -n $NS upgrade widget-operator $CHART --version $CHART_VERSION --reset-then-reuse-values --set apiUpgrade.stage=migrate --wait --timeout 20m"), 0)
		})

	fixRelease := "helm -n $NS upgrade widget-operator $CHART --version $CHART_VERSION --reset-then-reuse-values --wait --timeout 20m"
	walk("serving Certificate not Ready", monitoring.AlertWebhookCertificateNotReady, "Certificate widget-operator-serving is not Ready",
		func() {
			c.Kubectl(t, "-n", walkNS, "patch", "certificate", monitoring.DefaultCertificate, "--type=merge", "-p", `{"spec":{"issuerRef":{"name":"no-such-issuer"}}}`)
		},
		func() {
			onLaptop(runbookCommand(t, c.Root, "alerts/WidgetWebhookCertificateNotReady.md",
				"helm -n $NS get manifest widget-operator | kubectl apply --server-side --force-conflicts --field-manager=helm-restore -f -"), 0)
		})

	// The outage matrix, at migrate with every object stored as v1, the release at the chart's
	// defaults; then the break-glass procedure is not needed (see breakGlassWalk).
	m := &matrix{t: t, c: c, k: k, namespace: walkNS, stage: string(crd.StageMigrate),
		// With every pod gone, the WidgetWebhookDown page's fix brings them back.
		restoreRelease: func() { onLaptop(runbookCommand(t, c.Root, "alerts/WidgetWebhookDown.md", fixRelease), 0) }}
	m.run([]outage{m.webhooksGone(), m.controllerGone(), m.bothGone(), m.webhooksHung()})
}
