//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/widgetry/widget-operator/api/v1"
	"github.com/widgetry/widget-operator/api/v1alpha1"
	"github.com/widgetry/widget-operator/internal/controller"
	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/monitoring"
	"github.com/widgetry/widget-operator/internal/releasestatus"
	"github.com/widgetry/widget-operator/internal/runbooks"
	"github.com/widgetry/widget-operator/internal/testenv"
	"github.com/widgetry/widget-operator/internal/testenv/cluster"
)

// breakGlassPage is the conversion outage procedure the walk runs as written.
const breakGlassPage = "procedures/conversion-webhook-outage.md"

// runbookBlock returns the one sh block of page that holds marker, as on call copies it.
func runbookBlock(t *testing.T, root, page, marker string) string {
	t.Helper()
	blocks, err := runbooks.Blocks(filepath.Join(root, "runbooks"), page)
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, b := range blocks {
		if strings.Contains(b, marker) {
			found = append(found, b)
		}
	}
	if len(found) != 1 {
		t.Fatalf("runbooks/%s has %d sh blocks holding %q, want 1", page, len(found), marker)
	}
	return found[0]
}

// breakGlassWalk walks the conversion outage procedure from the laptop, every command as the
// runbook writes it, with every pod of ours gone at a stage where objects are still stored in
// both versions (so that every LIST needs the conversion webhook): reads through the storage
// version, a Widget and a namespace holding one deleted with their finalizers released by
// hand, then the restore, widgetctl verify, and both alerts (WidgetWebhookDown,
// WidgetCRDBreakGlass) silent again with status finding nothing wrong.
func breakGlassWalk(t *testing.T, c *cluster.Cluster, k client.Client, l *cluster.Laptop, p *cluster.Prometheus, namespace string,
	onLaptop func(command string, want int)) {
	t.Helper()
	ctx := context.Background()
	firing := func(alert string) string { return `ALERTS{alertname="` + alert + `",alertstate="firing"}` }
	step := func(marker string) string { return runbookBlock(t, c.Root, breakGlassPage, marker) }
	stuck := func(marker string) string { return runbookBlock(t, c.Root, "procedures/stuck-finalizers.md", marker) }
	// Our namespace is not the runbooks' default one.
	inNamespace := func(block string) string {
		return strings.ReplaceAll(block, "NS=widget-system\n", "NS="+namespace+"\n")
	}

	// A namespace holding a Widget the controller has finalized.
	const held = "break-glass-apps"
	c.Kubectl(t, "create", "namespace", held)
	w := newWidget("held")
	w.Namespace = held
	if err := k.Create(ctx, w); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "the controller finalized "+held+"/held", func() error {
		got := &v1alpha1.Widget{}
		if err := k.Get(ctx, client.ObjectKeyFromObject(w), got); err != nil {
			return err
		}
		for _, f := range got.Finalizers {
			if f == controller.Finalizer {
				return nil
			}
		}
		return fmt.Errorf("finalizers %v", got.Finalizers)
	})

	start := time.Now()
	// Gone at once, as with a lost node, not drained.
	c.Kubectl(t, "-n", namespace, "scale", "deployment/"+release+"-webhook", "deployment/"+release+"-controller", "--replicas=0")
	c.Kubectl(t, "-n", namespace, "delete", "pod", "-l", planesSelector, "--grace-period=0", "--force", "--wait=false")
	c.Kubectl(t, "-n", namespace, "wait", "--for=delete", "pod", "-l", planesSelector, "--timeout=3m")
	p.WaitFor(t, firing(monitoring.AlertWebhookDown), 1, 5*time.Minute)
	r := laptopStatus(t, l, 1)
	if !namesCause(r, "no webhook pod") {
		t.Fatalf("with our pods gone, status names no cause with %q: %+v", "no webhook pod", r.Causes)
	}
	// The API path is broken: a write through the version that is not the storage version
	// needs conversion. (Reads are answered from each version's watch cache, whose objects
	// were converted when they were cached; see the runbook's "What is broken".)
	onLaptop("kubectl -n "+apps+" annotate widgets.v1alpha1.widgetry.io walk-a outage=1 --request-timeout=10s", 1)

	// Step 1 (diagnose; its fixes cannot work here: the pods are meant to stay gone), then
	// break-glass (2.1 stop the writers, 2.2 conversion off) and reads through the storage
	// version (3).
	onLaptop(inNamespace(step("kubectl widget status")), 0)
	onLaptop(step("--replicas=0"), 0)
	onLaptop(step(`"strategy":"None"`), 0)
	onLaptop(step("kubectl get widgets.$SV.widgetry.io -A --request-timeout=10s"), 0)

	// Deletion goes on: a Widget deleted by name, a namespace holding one; their finalizer
	// released by hand as the stuck-finalizers page says, once each is being deleted.
	_, sv, _ := strings.Cut(stuck("SV=$("), "SV=$(")
	sv, _, _ = strings.Cut(sv, "\n")
	sv = "SV=$(" + sv + "\n"
	onLaptop("kubectl -n "+apps+" delete widgets.v1.widgetry.io walk-c --wait=false", 0)
	onLaptop(sv+strings.Replace(stuck("W_NS=<namespace of the Widget>"), "W_NS=<namespace of the Widget>; W=<name>", "W_NS="+apps+"; W=walk-c", 1), 0)
	onLaptop("kubectl delete namespace "+held+" --wait=false", 0)
	testenv.Eventually(t, time.Minute, "the namespace controller deleted "+held+"/held", func() error {
		// Stored as v1 (made at flip-storage), so read through v1 while conversion is off.
		got := &v1.Widget{}
		if err := k.Get(ctx, client.ObjectKeyFromObject(w), got); err != nil {
			return err
		}
		if got.DeletionTimestamp == nil {
			return fmt.Errorf("not being deleted yet")
		}
		return nil
	})
	onLaptop(sv+"W_NS="+held+"\n"+stuck("for W in"), 0)
	testenv.Eventually(t, 2*time.Minute, "walk-c and namespace "+held+" gone", func() error {
		out, err := c.Command(ctx, filepath.Join(c.Bin, "kubectl"), "get", "namespace", held, "--ignore-not-found", "-o", "name").CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "" {
			return fmt.Errorf("namespace %s: %s %w", held, out, err)
		}
		out, err = c.Command(ctx, filepath.Join(c.Bin, "kubectl"), "-n", apps, "get", "widgets.v1.widgetry.io", "walk-c", "--ignore-not-found", "-o", "name").CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "" {
			return fmt.Errorf("walk-c: %s %w", out, err)
		}
		return nil
	})
	t.Logf("break-glass: with every pod gone, a Widget and a namespace holding one deleted after %s", time.Since(start).Round(time.Second))

	// Restore (4): the release back, conversion on, the pods serving, verify; the pods report
	// the annotation (WidgetCRDBreakGlass fires), and its removal clears it.
	onLaptop(step("helm -n $NS upgrade widget-operator"), 0)
	p.WaitFor(t, firing(monitoring.AlertCRDBreakGlass), 1, 5*time.Minute)
	onLaptop(step("widgetry.io/break-glass-"), 0)
	p.WaitForNone(t, firing(monitoring.AlertCRDBreakGlass), 5*time.Minute)
	p.WaitForNone(t, firing(monitoring.AlertWebhookDown), 5*time.Minute)
	deadline := time.Now().Add(3 * time.Minute)
	for r = laptopStatus(t, l, -1); len(r.Causes) > 0 && time.Now().Before(deadline); r = laptopStatus(t, l, -1) {
		time.Sleep(5 * time.Second)
	}
	if len(r.Causes) > 0 {
		t.Fatalf("after the break-glass restore status still names %+v", r.Causes)
	}
	healthy(t, r, namespace, 3, crd.StageFlipStorage) // install, flip-storage, the restore
	if err := k.Get(ctx, client.ObjectKey{Namespace: apps, Name: "walk-a"}, &v1alpha1.Widget{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("after the restore a read through v1alpha1 fails: %v", err)
	}
	t.Logf("break-glass walked in %s: WidgetWebhookDown and WidgetCRDBreakGlass fired and cleared, status clean", time.Since(start).Round(time.Second))
}

// namesCause reports whether the report names a cause whose summary contains want.
func namesCause(r *releasestatus.Report, want string) bool {
	for _, c := range r.Causes {
		if strings.Contains(c.Summary, want) {
			return true
		}
	}
	return false
}
