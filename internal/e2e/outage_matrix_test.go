//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/widgetry/widget-operator/api/v1"
	"github.com/widgetry/widget-operator/api/v1alpha1"
	"github.com/widgetry/widget-operator/internal/controller"
	"github.com/widgetry/widget-operator/internal/manager"
	"github.com/widgetry/widget-operator/internal/reports"
	"github.com/widgetry/widget-operator/internal/testenv"
	"github.com/widgetry/widget-operator/internal/testenv/cluster"
)

// The outage matrix's columns: the requests clients make through each version, and the
// cluster's own work on Widgets (the controller's finalizer, the namespace controller, the
// garbage collector), in the order the README's table shows them.
const (
	colCreateV1      = "create v1"
	colUpdateV1      = "update v1"
	colDeleteV1      = "delete v1"
	colCreateV1a1    = "create v1alpha1"
	colUpdateV1a1    = "update v1alpha1"
	colDeleteV1a1    = "delete v1alpha1"
	colFinalizer     = "finalizer removed by the controller"
	colNamespace     = "namespace with a finalized Widget deleted"
	colGarbage       = "garbage collector's cascade"
	colListV1        = "LIST v1"
	colListV1a1      = "LIST v1alpha1"
	matrixAttempts   = 3
	matrixNamespace  = "outage-matrix"
	matrixWorkBudget = 45 * time.Second
)

var matrixColumns = []string{colCreateV1, colUpdateV1, colDeleteV1, colCreateV1a1, colUpdateV1a1, colDeleteV1a1, colFinalizer, colNamespace, colGarbage, colListV1, colListV1a1}

// outage is one row of the matrix: how to bring it about and how to end it. controllerGone
// says the cells that are the controller's own work cannot be measured.
type outage struct {
	name           string
	controllerGone bool
	begin, end     func()
}

// matrix measures the outage matrix in the release's namespace: for each outage, every kind of
// request and of the cluster's work on Widgets is attempted matrixAttempts times while it
// lasts, each cell at once beside the others, and the share that succeeded and the slowest
// attempt are recorded. The release must be at a stage where the storage version is v1 and
// every object is stored as v1 (migrate, after its hook): requests through v1alpha1 then need
// the conversion webhook, and nothing else does.
type matrix struct {
	t         *testing.T
	c         *cluster.Cluster
	k         client.Client
	namespace string // the release's
	stage     string
	// restoreRelease brings the release's pods back after they were all deleted (on call's
	// command from the runbook).
	restoreRelease func()
}

// run measures every outage, writes the report and fails each cell that does not need
// conversion and did not succeed every time.
func (m *matrix) run(outages []outage) reports.OutageMatrix {
	t := m.t
	m.c.Kubectl(t, "create", "namespace", matrixNamespace)
	report := reports.OutageMatrix{Machine: fmt.Sprintf("%d cores, %s/%s", runtime.NumCPU(), runtime.GOOS, runtime.GOARCH), Stage: m.stage,
		TimeoutSeconds: m.webhookTimeoutSeconds()}
	for i, o := range outages {
		fixtures := m.prepare(i)
		start := time.Now()
		o.begin()
		t.Logf("outage matrix: %s began (%s)", o.name, time.Since(start).Round(time.Second))
		row := m.measure(i, o, fixtures)
		o.end()
		t.Logf("outage matrix: %s measured and ended (%s)", o.name, time.Since(start).Round(time.Second))
		report.Rows = append(report.Rows, row)
		for _, cell := range row.Cells {
			if cell.NotMeasured == "" && !cell.NeedsConversion && cell.Succeeded != cell.Attempts {
				t.Errorf("%s: %s succeeded %d of %d times although it needs no conversion: %s", o.name, cell.Column, cell.Succeeded, cell.Attempts, cell.FirstError)
			}
		}
	}
	report.Date = time.Now().UTC().Format(time.RFC3339)
	dir := reports.Dir(m.c.Root)
	if err := reports.WriteOutage(dir, report); err != nil {
		t.Fatal(err)
	}
	t.Logf("outage matrix (%s; make reports publishes it):\n%s", filepath.Join(dir, reports.OutageFile), report.Text())
	return report
}

// webhookTimeoutSeconds is the validating webhook's timeoutSeconds as installed.
func (m *matrix) webhookTimeoutSeconds() int {
	out := m.c.Kubectl(m.t, "get", "validatingwebhookconfiguration", release, "-o", "jsonpath={.webhooks[0].timeoutSeconds}")
	n, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		m.t.Fatalf("timeoutSeconds %q: %v", out, err)
	}
	return n
}

// fixtures are the objects a row's cells act on, made while everything is healthy.
type fixtures struct {
	// updated and deleted are Widgets per column, matrixAttempts each.
	widgets map[string][]string
	// namespaces each hold one Widget the controller has finalized.
	namespaces []string
}

func (m *matrix) name(row int, column string, attempt int) string {
	short := map[string]string{colCreateV1: "c1", colUpdateV1: "u1", colDeleteV1: "d1", colCreateV1a1: "ca", colUpdateV1a1: "ua", colDeleteV1a1: "da",
		colFinalizer: "fin", colNamespace: "ns", colGarbage: "gc"}[column]
	return fmt.Sprintf("om%d-%s-%d", row, short, attempt)
}

func matrixWidget(namespace, name string) *v1.Widget {
	return &v1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		// An endpoint, so that the controller makes a Service as well as a Deployment.
		Spec: v1.WidgetSpec{Image: "registry.example.com/outage:v1", Size: ptr.To[int32](0), Endpoints: map[string]v1.EndpointSpec{"http": {Port: 8080}}}}
}

// prepare makes row's fixtures through v1 and waits until the controller has finalized each
// Widget and made its Deployment and Service, so that a cell measures only the outage.
func (m *matrix) prepare(row int) fixtures {
	t := m.t
	ctx := context.Background()
	f := fixtures{widgets: map[string][]string{}}
	var finalized []client.ObjectKey
	for _, col := range []string{colUpdateV1, colDeleteV1, colUpdateV1a1, colDeleteV1a1, colFinalizer, colGarbage} {
		for i := range matrixAttempts {
			name := m.name(row, col, i)
			if err := m.k.Create(ctx, matrixWidget(matrixNamespace, name)); err != nil {
				t.Fatal(err)
			}
			f.widgets[col] = append(f.widgets[col], name)
			finalized = append(finalized, client.ObjectKey{Namespace: matrixNamespace, Name: name})
		}
	}
	for i := range matrixAttempts {
		name := m.name(row, colNamespace, i)
		m.c.Kubectl(t, "create", "namespace", name)
		if err := m.k.Create(ctx, matrixWidget(name, "held")); err != nil {
			t.Fatal(err)
		}
		f.namespaces = append(f.namespaces, name)
		finalized = append(finalized, client.ObjectKey{Namespace: name, Name: "held"})
	}
	testenv.Eventually(t, 2*time.Minute, "the controller finalized every fixture and made its children", func() error {
		for _, key := range finalized {
			w := &v1.Widget{}
			if err := m.k.Get(ctx, key, w); err != nil {
				return err
			}
			if !controllerHolds(w) {
				return fmt.Errorf("%s has no finalizer %s yet", key, controller.Finalizer)
			}
			if err := m.k.Get(ctx, key, &corev1.Service{}); err != nil {
				return fmt.Errorf("%s's Service: %w", key, err)
			}
		}
		return nil
	})
	return f
}

func controllerHolds(w *v1.Widget) bool {
	for _, f := range w.Finalizers {
		if f == controller.Finalizer {
			return true
		}
	}
	return false
}

// measure runs every cell of row at once, each cell's attempts one after another.
func (m *matrix) measure(row int, o outage, f fixtures) reports.OutageRow {
	ctx := context.Background()
	type attempt func(ctx context.Context, i int) error
	v1alpha1Widget := func(name string) *v1alpha1.Widget {
		return &v1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: matrixNamespace, Name: name},
			Spec: v1alpha1.WidgetSpec{Image: "registry.example.com/outage:v1", Replicas: ptr.To[int32](0)}}
	}
	// A new image tag: a spec change the controller applies without starting any pod.
	patch := func(i int) client.Patch {
		return client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"spec":{"image":"registry.example.com/outage:v%d"}}`, i+2)))
	}
	// gone waits until key is gone, or the work's budget passes.
	gone := func(ctx context.Context, key client.ObjectKey, obj client.Object) error {
		deadline := time.Now().Add(matrixWorkBudget)
		for {
			err := m.k.Get(ctx, key, obj)
			if apierrors.IsNotFound(err) {
				return nil
			}
			if time.Now().After(deadline) {
				if err == nil {
					err = fmt.Errorf("still there after %s (finalizers %v)", matrixWorkBudget, obj.GetFinalizers())
				}
				return err
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	attempts := map[string]attempt{
		colCreateV1: func(ctx context.Context, i int) error {
			return m.k.Create(ctx, matrixWidget(matrixNamespace, m.name(row, colCreateV1, i)))
		},
		colUpdateV1: func(ctx context.Context, i int) error {
			return m.k.Patch(ctx, matrixWidget(matrixNamespace, f.widgets[colUpdateV1][i]), patch(i))
		},
		colDeleteV1: func(ctx context.Context, i int) error {
			return m.k.Delete(ctx, matrixWidget(matrixNamespace, f.widgets[colDeleteV1][i]))
		},
		colCreateV1a1: func(ctx context.Context, i int) error {
			return m.k.Create(ctx, v1alpha1Widget(m.name(row, colCreateV1a1, i)))
		},
		colUpdateV1a1: func(ctx context.Context, i int) error {
			return m.k.Patch(ctx, v1alpha1Widget(f.widgets[colUpdateV1a1][i]), patch(i))
		},
		colDeleteV1a1: func(ctx context.Context, i int) error {
			return m.k.Delete(ctx, v1alpha1Widget(f.widgets[colDeleteV1a1][i]))
		},
		// The Widget deleted (a delete calls no admission webhook) and gone once the
		// controller has released its finalizer.
		colFinalizer: func(ctx context.Context, i int) error {
			w := matrixWidget(matrixNamespace, f.widgets[colFinalizer][i])
			if err := m.k.Delete(ctx, w); err != nil {
				return err
			}
			return gone(ctx, client.ObjectKeyFromObject(w), &v1.Widget{})
		},
		// The namespace controller deletes the Widget, the controller releases it, the
		// namespace goes.
		colNamespace: func(ctx context.Context, i int) error {
			n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.namespaces[i]}}
			if err := m.k.Delete(ctx, n); err != nil {
				return err
			}
			return gone(ctx, client.ObjectKeyFromObject(n), &corev1.Namespace{})
		},
		// Deleted in the foreground: the garbage collector deletes the Widget's Deployment and
		// Service first (whatever the controller does with its finalizer).
		colGarbage: func(ctx context.Context, i int) error {
			name := f.widgets[colGarbage][i]
			if err := m.k.Delete(ctx, matrixWidget(matrixNamespace, name), client.PropagationPolicy(metav1.DeletePropagationForeground)); err != nil {
				return err
			}
			key := client.ObjectKey{Namespace: matrixNamespace, Name: name}
			if err := gone(ctx, key, &corev1.Service{}); err != nil {
				return fmt.Errorf("Service: %w", err)
			}
			return gone(ctx, key, &appsv1.Deployment{})
		},
		colListV1: func(ctx context.Context, _ int) error {
			return m.k.List(ctx, &v1.WidgetList{})
		},
		colListV1a1: func(ctx context.Context, _ int) error {
			return m.k.List(ctx, &v1alpha1.WidgetList{})
		},
	}
	needsConversion := map[string]bool{colCreateV1a1: true, colUpdateV1a1: true, colDeleteV1a1: true, colListV1a1: true}
	controllersWork := map[string]bool{colFinalizer: true, colNamespace: true}

	cells := make([]reports.OutageCell, len(matrixColumns))
	var wg sync.WaitGroup
	for ci, col := range matrixColumns {
		cells[ci] = reports.OutageCell{Column: col, NeedsConversion: needsConversion[col]}
		if o.controllerGone && controllersWork[col] {
			cells[ci].NotMeasured = "the controller is what is gone"
			continue
		}
		wg.Add(1)
		go func(cell *reports.OutageCell, try attempt) {
			defer wg.Done()
			for i := range matrixAttempts {
				// A request gets the apiserver's own bound: a conversion call waits at most
				// 30 s, an admission call timeoutSeconds.
				actx, cancel := context.WithTimeout(ctx, matrixWorkBudget+15*time.Second)
				began := time.Now()
				err := try(actx, i)
				took := time.Since(began)
				cancel()
				cell.Attempts++
				if took.Seconds()*1000 > cell.WorstMs {
					cell.WorstMs = float64(took.Milliseconds())
				}
				if err == nil {
					cell.Succeeded++
				} else if cell.FirstError == "" {
					cell.FirstError = shorten(err.Error(), 300)
				}
			}
		}(&cells[ci], attempts[col])
	}
	wg.Wait()
	return reports.OutageRow{Name: o.name, Cells: cells}
}

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// The outages, each brought about as it happens in production and ended as on call would.

// webhooksGone takes every webhook process away while the controllers run and lead: the
// webhook Service is left without endpoints, then the processes of each pod's webhook
// container are killed, so that the connections the apiserver keeps open to them end too (the
// kubelet restarts them, outside the Service). The Service's selector is put back at the end.
func (m *matrix) webhooksGone() outage {
	svc := release + "-webhook"
	var selector string
	return outage{name: "webhook processes gone (killed, no endpoint), controller running",
		begin: func() {
			selector = m.c.Kubectl(m.t, "-n", m.namespace, "get", "service", svc, "-o", "jsonpath={.spec.selector}")
			m.c.Kubectl(m.t, "-n", m.namespace, "patch", "service", svc, "--type=merge", "-p", `{"spec":{"selector":{"widgetry.io/outage-matrix":"no-such-pod"}}}`)
			m.waitEndpoints(svc, false)
			var killed []int
			for _, p := range webhookPodsOf(m.t, m.k, m.namespace) {
				killed = append(killed, signalContainer(m.t, &p, "webhook", syscall.SIGKILL)...)
			}
			m.waitProcessesGone(killed)
			m.waitUnreachable(svc)
		},
		end: func() {
			m.c.Kubectl(m.t, "-n", m.namespace, "patch", "service", svc, "--type=json", "-p", `[{"op":"replace","path":"/spec/selector","value":`+selector+`}]`)
			m.c.Kubectl(m.t, "-n", m.namespace, "wait", "--for=condition=Ready", "pod", "-l", "app.kubernetes.io/component=webhook", "--timeout=3m")
			m.waitEndpoints(svc, true)
		}}
}

// waitProcessesGone waits until none of pids exists any more: the connections they held are
// closed.
func (m *matrix) waitProcessesGone(pids []int) {
	testenv.Eventually(m.t, 2*time.Minute, fmt.Sprintf("processes %v ended", pids), func() error {
		for _, pid := range pids {
			if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
				return fmt.Errorf("process %d still there (%w)", pid, err)
			}
		}
		return nil
	})
}

// waitEndpoints waits until service has a ready endpoint (want) or none.
func (m *matrix) waitEndpoints(service string, want bool) {
	testenv.Eventually(m.t, 2*time.Minute, fmt.Sprintf("service %s has ready endpoints: %v", service, want), func() error {
		slices := &discoveryv1.EndpointSliceList{}
		if err := m.k.List(context.Background(), slices, client.InNamespace(m.namespace), client.MatchingLabels{discoveryv1.LabelServiceName: service}); err != nil {
			return err
		}
		ready := 0
		for _, s := range slices.Items {
			for _, e := range s.Endpoints {
				if ptr.Deref(e.Conditions.Ready, false) {
					ready++
				}
			}
		}
		if (ready > 0) != want {
			return fmt.Errorf("%d ready endpoints", ready)
		}
		return nil
	})
}

// waitUnreachable waits until a connection to service's ClusterIP, made where the apiserver
// makes its own, is refused: the outage as the apiserver sees it. A pod deleted with
// --force is gone from the API before its processes end, and kube-proxy follows the
// endpoints a moment later; until then the webhooks still answer.
func (m *matrix) waitUnreachable(service string) {
	ip := strings.TrimSpace(m.c.Kubectl(m.t, "-n", m.namespace, "get", "service", service, "-o", "jsonpath={.spec.clusterIP}"))
	testenv.Eventually(m.t, 2*time.Minute, "connections to service "+service+" refused", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		conn, err := m.c.DialContext(ctx, "tcp", net.JoinHostPort(ip, "443"))
		if err != nil {
			return nil
		}
		conn.Close()
		return fmt.Errorf("%s:443 still accepts connections", ip)
	})
}

// controllerGone keeps every controller from leading while the webhooks serve: the Lease is
// taken by an identity that is no pod of ours (as a controller that hangs while holding it
// would), so the leader loses it and every replica stands by. At the end the Lease is let to
// expire and a replica leads again.
func (m *matrix) controllerGone() outage {
	key := client.ObjectKey{Namespace: m.namespace, Name: manager.LeaderElectionID}
	ctx := context.Background()
	setLease := func(holder string, duration int32, renewed time.Time) {
		testenv.Eventually(m.t, 30*time.Second, "the Lease taken over", func() error {
			lease := &coordinationv1.Lease{}
			if err := m.k.Get(ctx, key, lease); err != nil {
				return err
			}
			lease.Spec.HolderIdentity = ptr.To(holder)
			lease.Spec.LeaseDurationSeconds = ptr.To(duration)
			lease.Spec.AcquireTime = &metav1.MicroTime{Time: renewed}
			lease.Spec.RenewTime = &metav1.MicroTime{Time: renewed}
			return m.k.Update(ctx, lease)
		})
	}
	return outage{name: "controller gone (no leader), webhooks serving", controllerGone: true,
		begin: func() {
			setLease("outage-matrix", 3600, time.Now())
			// The leader finds out at its next renewal (every 2 s) and stops.
			time.Sleep(5 * time.Second)
		},
		end: func() {
			setLease("outage-matrix", 1, time.Now().Add(-time.Hour))
			testenv.Eventually(m.t, 2*time.Minute, "a manager pod leads again", func() error {
				lease := &coordinationv1.Lease{}
				if err := m.k.Get(ctx, key, lease); err != nil {
					return err
				}
				if h := ptr.Deref(lease.Spec.HolderIdentity, ""); !strings.HasPrefix(h, release) {
					return fmt.Errorf("held by %q", h)
				}
				return nil
			})
		}}
}

// bothGone scales the manager to 0 and deletes its pods at once, as a lost node would.
func (m *matrix) bothGone() outage {
	var replicas string
	return outage{name: "webhooks and controller gone (no pod)", controllerGone: true,
		begin: func() {
			replicas = m.planeReplicas()
			// A pod deleted with --force leaves the API at once; its processes end a moment
			// later, and until then they answer on the connections the apiserver holds.
			var pids []int
			for _, plane := range planes {
				for _, p := range planePodsOf(m.t, m.k, m.namespace, plane) {
					pids = append(pids, signalContainer(m.t, &p, plane, 0)...)
				}
			}
			m.c.Kubectl(m.t, "-n", m.namespace, "scale", "deployment/"+release+"-webhook", "deployment/"+release+"-controller", "--replicas=0")
			m.c.Kubectl(m.t, "-n", m.namespace, "delete", "pod", "-l", planesSelector, "--grace-period=0", "--force", "--wait=false")
			m.c.Kubectl(m.t, "-n", m.namespace, "wait", "--for=delete", "pod", "-l", planesSelector, "--timeout=3m")
			// The kubelet still gives them their termination grace (the drain), minutes; a
			// lost node gives none.
			for _, pid := range pids {
				_ = syscall.Kill(pid, syscall.SIGKILL) // ended already, or ends now
			}
			m.waitProcessesGone(pids)
			m.waitUnreachable(release + "-webhook")
		},
		end: func() {
			m.restoreRelease()
			if got := m.planeReplicas(); got != replicas {
				m.t.Fatalf("after the restore the planes' Deployments have %s replicas, had %s", got, replicas)
			}
			m.waitEndpoints(release+"-webhook", true)
		}}
}

// webhooksHung stops every process of every manager pod's webhook container (SIGSTOP): the
// kernel still accepts connections on the listening socket, nothing answers. It is left to the
// cluster what happens next (readiness takes the pods out of the Service, liveness restarts the
// containers); at the end the processes still stopped are continued and the pods must be Ready.
func (m *matrix) webhooksHung() outage {
	var stopped []int
	return outage{name: reports.HungRow,
		begin: func() {
			for _, p := range webhookPodsOf(m.t, m.k, m.namespace) {
				stopped = append(stopped, signalContainer(m.t, &p, "webhook", syscall.SIGSTOP)...)
			}
		},
		end: func() {
			for _, pid := range stopped {
				_ = syscall.Kill(pid, syscall.SIGCONT) // gone already if the kubelet restarted it
			}
			m.c.Kubectl(m.t, "-n", m.namespace, "wait", "--for=condition=Ready", "pod", "-l", "app.kubernetes.io/component=webhook", "--timeout=3m")
			m.waitEndpoints(release+"-webhook", true)
		}}
}

// signalContainer sends sig from the node to every process of container name of pod (found
// through their cgroup, which names the container) and returns their PIDs; signal 0 only
// finds them.
func signalContainer(t *testing.T, pod *corev1.Pod, name string, sig syscall.Signal) []int {
	t.Helper()
	var id string
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == name {
			_, id, _ = strings.Cut(cs.ContainerID, "://")
		}
	}
	if id == "" {
		t.Fatalf("pod %s has no running container %s", pod.Name, name)
	}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		cgroup, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cgroup"))
		if err != nil || !strings.Contains(string(cgroup), id) {
			continue
		}
		if err := syscall.Kill(pid, sig); err == nil {
			pids = append(pids, pid)
		} else if !errors.Is(err, syscall.ESRCH) {
			t.Fatalf("%s to %d: %v", sig, pid, err)
		}
	}
	if len(pids) == 0 {
		t.Fatalf("no process of container %s (%s) of pod %s found", name, id, pod.Name)
	}
	if sig != 0 {
		t.Logf("%s sent to %d process(es) of container %s of pod %s", sig, len(pids), name, pod.Name)
	}
	return pids
}

// planes are the release's two planes, each a Deployment <release>-<plane> whose container is
// named after it; planesSelector selects the pods of both.
var planes = []string{"webhook", "controller"}

const planesSelector = "app.kubernetes.io/component in (webhook,controller)"

// planeReplicas are the replicas the planes' Deployments ask for ("webhook N, controller M").
func (m *matrix) planeReplicas() string {
	var out []string
	for _, plane := range planes {
		out = append(out, plane+" "+m.c.Kubectl(m.t, "-n", m.namespace, "get", "deployment", release+"-"+plane, "-o", "jsonpath={.spec.replicas}"))
	}
	return strings.Join(out, ", ")
}
