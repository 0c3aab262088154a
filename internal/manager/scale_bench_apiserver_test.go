//go:build envtest

package manager_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/widgetry/widget-operator/api/v1"
	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/scheme"
	"github.com/widgetry/widget-operator/internal/testenv"
	"github.com/widgetry/widget-operator/internal/testenv/memprobe"
	"github.com/widgetry/widget-operator/internal/testenv/widgetenv"
	"github.com/widgetry/widget-operator/internal/webhook"
)

// BenchmarkManagerAtScale runs widget-manager (the binary, its own process, as widgetenv
// runs it: leader, controller and webhooks) with the Widget CRD at flip-storage and its
// webhooks registered, creates N Widgets through the apiserver (WIDGET_BENCH_WIDGETS,
// default 10000; every create goes through its admission webhooks, the v1alpha1 ones through
// its conversion webhook too) and waits until the controller has reconciled every one of them
// (catalog entry, Deployment, Service, then the status for their generation; at most
// WIDGET_BENCH_RECONCILE_MINUTES, default 60).
//
// It reports the manager's resident set size, VmRSS of its process: the manager alone - the
// apiserver, etcd and this test (the client) are other processes. rss-idle-MiB 5 s after it
// is ready, rss-created-MiB once the creates returned, rss-reconciled-MiB once all are
// reconciled, rss-settled-MiB once its CPU use has fallen below 5% of a core (the second
// reconcile of each Widget done too; target <= 150, against the chart's 256Mi limit; settled-s
// is when, from the first create), heap-live-MiB its live heap then (after a collection, read through its pprof endpoint; WIDGET_BENCH_HEAP_PROFILE names
// a file for the heap profile itself), rss-peak-MiB the highest seen
// every second in between, rss-after-load-MiB after the load below. The manager runs as the
// chart runs it: GOMEMLIMIT is the container's memory limit, WIDGET_BENCH_MEMORY_LIMIT_MIB
// (default 256, the chart's; 0 for none, to see the garbage a collector without a limit
// leaves), which the manager lowers to 90%; WIDGET_BENCH_GOGC sets its GOGC (default: its own
// --gogc, memlimit.DefaultGCPercent).
//
// Then, with those Widgets in its cache, single-object ConversionReviews at 200 requests/s
// for WIDGET_BENCH_LOAD_SECONDS (default 10, after 1 s of warm-up) go straight to its
// webhook port over TLS (widgetenv.Load); p50-ms, p99-ms (target <= 5) and max-ms are their
// latencies as this test's client sees them, on the same cores as everything else. Any
// failed request fails the benchmark. One run is the whole measurement: -benchtime 1x.
// scripts/bench-ratios.sh prints the targets.
func BenchmarkManagerAtScale(b *testing.B) {
	n := widgetenv.EnvInt(b, "WIDGET_BENCH_WIDGETS", 10000)
	reconcileWithin := time.Duration(widgetenv.EnvInt(b, "WIDGET_BENCH_RECONCILE_MINUTES", 60)) * time.Minute
	loadFor := time.Duration(widgetenv.EnvInt(b, "WIDGET_BENCH_LOAD_SECONDS", 10)) * time.Second
	const ns = "fleet"
	// A cluster's Service range (kubeadm's is a /12): envtest's /24 holds 254 Services, and
	// every Widget has one.
	env := testenv.Start(b, testenv.Options{Scheme: scheme.New(), APIServerFlags: map[string]string{"service-cluster-ip-range": "10.96.0.0/16"}})
	op := widgetenv.Setup(b, env, crd.StageFlipStorage)
	managerEnv := benchManagerEnv(b)
	pprofURL := "http://127.0.0.1:" + strconv.Itoa(testenv.FreePort(b))
	m := op.StartManager(b, widgetenv.ManagerOptions{Env: managerEnv, Args: []string{"--pprof-bind-address=" + strings.TrimPrefix(pprofURL, "http://")}})
	if err := env.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		b.Fatal(err)
	}
	rss := func() float64 { return rssMiB(b, m.Pid()) }

	b.ResetTimer()
	time.Sleep(5 * time.Second) // past start-up: caches synced, leader elected
	idle := rss()
	peak, stopPeak := sampleMax(time.Second, rss)
	start := time.Now()
	widgetenv.CreateWidgets(b, env.Client, ns, n)
	created := rss()
	waitReconciled(b, env.Client, ns, n, reconcileWithin)
	reconciledAfter := time.Since(start)
	reconciled := rss()
	// The status each first reconcile writes queues a second one, which hands the fields of
	// the children just created over to the controller's apply: the manager is settled once
	// those are done too.
	settledAfter := waitIdle(b, m.Pid(), reconcileWithin) + reconciledAfter
	settled := rss()
	stopPeak()
	heap, err := memprobe.ReadRemoteHeap(pprofURL)
	if err != nil {
		b.Fatalf("heap of widget-manager: %v", err)
	}
	saveHeapProfile(b, pprofURL, os.Getenv("WIDGET_BENCH_HEAP_PROFILE"))

	load := &widgetenv.Load{Client: op.WebhookClient(), Rate: 200, Paths: []string{webhook.ConvertPath},
		Targets: func() []string { return []string{"https://127.0.0.1:" + strconv.Itoa(m.WebhookPort)} }}
	runLoad := func(d time.Duration) *widgetenv.LoadResult {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		res := load.Run(ctx)
		if res.Failures > 0 {
			b.Fatalf("webhook load: %s: %v", res, res.Errors)
		}
		return res
	}
	runLoad(time.Second) // connections and their TLS handshakes
	res := runLoad(loadFor)
	b.StopTimer()

	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(float64(n), "widgets") // for the report: the size the figures are for
	b.ReportMetric(idle, "rss-idle-MiB")
	b.ReportMetric(created, "rss-created-MiB")
	b.ReportMetric(max(*peak, reconciled), "rss-peak-MiB")
	b.ReportMetric(reconciled, "rss-reconciled-MiB")
	b.ReportMetric(settled, "rss-settled-MiB")
	b.ReportMetric(settledAfter.Seconds(), "settled-s")
	b.ReportMetric(float64(heap.Alloc)/(1<<20), "heap-live-MiB")
	b.ReportMetric(rss(), "rss-after-load-MiB")
	b.ReportMetric(reconciledAfter.Seconds(), "reconciled-s")
	b.ReportMetric(ms(res.Quantile(0.5)), "p50-ms")
	b.ReportMetric(ms(res.Quantile(0.99)), "p99-ms")
	b.ReportMetric(ms(res.Worst), "max-ms")
	b.Logf("%d Widgets reconciled %s after the first create; load: %s", n, reconciledAfter.Round(time.Second), res)
}

// benchManagerEnv is the manager's environment in the scale benchmarks: GOMEMLIMIT as the
// chart sets it from WIDGET_BENCH_MEMORY_LIMIT_MIB (default 256; 0 for none), and GOGC from
// WIDGET_BENCH_GOGC when set.
func benchManagerEnv(b *testing.B) []string {
	b.Helper()
	var env []string
	if limit := widgetenv.EnvInt(b, "WIDGET_BENCH_MEMORY_LIMIT_MIB", 256); limit > 0 {
		env = append(env, "GOMEMLIMIT="+strconv.Itoa(limit<<20))
	}
	if gogc := os.Getenv("WIDGET_BENCH_GOGC"); gogc != "" {
		env = append(env, "GOGC="+gogc)
	}
	return env
}

// rssMiB is the VmRSS of process pid in MiB; a failed read fails the benchmark.
func rssMiB(b *testing.B, pid int) float64 {
	b.Helper()
	v, err := memprobe.RSS(pid)
	if err != nil {
		b.Fatalf("RSS of process %d: %v", pid, err)
	}
	return float64(v) / (1 << 20)
}

// saveHeapProfile writes the manager's heap profile to path, when one is given, for
// go tool pprof -top -sample_index=inuse_space path.
func saveHeapProfile(b *testing.B, pprofURL, path string) {
	b.Helper()
	if path == "" {
		return
	}
	resp, err := http.Get(pprofURL + "/debug/pprof/heap")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Fatalf("heap profile: HTTP %d, %v", resp.StatusCode, err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		b.Fatal(err)
	}
	b.Logf("heap profile of widget-manager written to %s", path)
}

// waitIdle waits until the process with pid has used less than 5% of a core over 5 s and
// returns how long that took, failing the benchmark after within.
func waitIdle(b *testing.B, pid int, within time.Duration) time.Duration {
	b.Helper()
	const window = 5 * time.Second
	start := time.Now()
	for {
		before, err := memprobe.CPUTime(pid)
		if err != nil {
			b.Fatal(err)
		}
		time.Sleep(window)
		after, err := memprobe.CPUTime(pid)
		if err != nil {
			b.Fatal(err)
		}
		if after-before < window/20 {
			return time.Since(start)
		}
		if time.Since(start) > within {
			b.Fatalf("widget-manager still busy after %s: %s of CPU in the last %s", within, after-before, window)
		}
	}
}

// sampleMax calls read every interval until stop is called and keeps the highest value in
// *peak, which is safe to read once stop has returned.
func sampleMax(interval time.Duration, read func() float64) (peak *float64, stop func()) {
	peak = new(float64)
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			*peak = max(*peak, read())
			select {
			case <-quit:
				return
			case <-t.C:
			}
		}
	})
	return peak, func() { close(quit); wg.Wait() }
}

// waitReconciled waits until every one of the n Widgets in namespace has a Ready condition
// for its generation saying ReplicasUnavailable: the controller writes the status after the
// catalog entry, the Deployment and the Service, and without kube-controller-manager a
// Deployment has no pods. (A status the test wrote says Available.)
func waitReconciled(b *testing.B, c client.Client, namespace string, n int, within time.Duration) {
	b.Helper()
	deadline, lastLog := time.Now().Add(within), time.Now()
	for {
		list := &v1.WidgetList{}
		if err := c.List(context.Background(), list, client.InNamespace(namespace)); err != nil {
			b.Fatal(err)
		}
		done, failed := 0, ""
		for i := range list.Items {
			w := &list.Items[i]
			ready := meta.FindStatusCondition(w.Status.Conditions, v1.ConditionReady)
			switch {
			case ready == nil || ready.ObservedGeneration != w.Generation:
			case ready.Reason == v1.ReasonReplicasUnavailable:
				done++
			case ready.Reason == v1.ReasonReconcileFailed && failed == "":
				failed = fmt.Sprintf("; %s failed: %s", w.Name, ready.Message)
			}
		}
		if done == n {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d Widgets reconciled after %s%s", done, n, within, failed)
		}
		if time.Since(lastLog) > 30*time.Second {
			b.Logf("%d of %d Widgets reconciled%s", done, n, failed)
			lastLog = time.Now()
		}
		time.Sleep(5 * time.Second)
	}
}
