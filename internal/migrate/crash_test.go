//go:build envtest

package migrate_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/widgetry/widget-operator/api/v1"
	"github.com/widgetry/widget-operator/api/v1alpha1"
	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/migrate"
	"github.com/widgetry/widget-operator/internal/testenv"
	"github.com/widgetry/widget-operator/internal/testenv/widgetenv"
)

// childKubeconfigEnv, when set, makes TestMigrateChildProcess run a migration against that
// kubeconfig: TestCrashAndResume starts the test binary itself as a migrator it can SIGKILL,
// which (unlike cancelling a context) gives the migrator no chance to record anything.
const childKubeconfigEnv = "WIDGET_MIGRATE_CHILD_KUBECONFIG"

// updatesAnnotation counts the writers' updates of an object.
const updatesAnnotation = "test.widgetry.io/updates"

// TestCrashAndResume kills the migrator at random points of a migration, alternately by
// cancelling it in-process and by SIGKILL of a child process, while writers keep updating
// objects through both versions. The rerun resumes (not restarts) and finishes; every object
// is re-encoded, none lost or duplicated, each counted exactly once, and no update is lost.
func TestCrashAndResume(t *testing.T) {
	t.Parallel() // each test has its own control plane; they overlap their waits
	n := widgetenv.EnvInt(t, "WIDGET_MIGRATE_CRASH_OBJECTS", 2000)
	kills := widgetenv.EnvInt(t, "WIDGET_MIGRATE_KILLS", 3)
	if kills > 80 {
		t.Fatalf("WIDGET_MIGRATE_KILLS=%d: at most 80 distinct kill points (one per percent from 10 to 89)", kills)
	}
	env := startEnv(t, testenv.Options{}, "fleet")
	ctx := context.Background()
	widgetenv.CreateWidgets(t, env.Client, "fleet", n)
	uids := uidsByName(t, env)
	widgetenv.SetStorageVersion(t, env, "v1", probeNamespace)

	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 0))
	// Distinct points between 10 % and 89 % of the objects (a repeated point would kill a
	// resumed run before it did anything, proving less).
	points := make([]int64, kills)
	for k, pct := range rng.Perm(80)[:kills] {
		points[k] = int64(n) * int64(10+pct) / 100
	}
	slices.Sort(points)
	t.Logf("seed %d: kill points after %v objects of %d", seed, points, n)

	stopWriters, updates := startWriters(t, env, n, 2)
	m := newMigrator(t, env)
	for k, point := range points {
		var done int64
		if k%2 == 0 {
			done = killInProcess(t, m, point)
		} else {
			done = killChild(t, env, point)
		}
		p := progressObject(t, env)
		if p.Phase != migrate.PhaseRunning || p.Attempts != int64(k+1) {
			t.Fatalf("after kill %d: progress phase %s attempts %d, want Running and %d", k+1, p.Phase, p.Attempts, k+1)
		}
		t.Logf("kill %d at %d objects done (%d checkpointed, next after %q)", k+1, done, p.Counts.Done(), p.LastKey)
	}
	before := progressObject(t, env).Counts.Done()
	res, err := m.Migrate(ctx, migrate.Options{CRD: crd.WidgetName, ProgressNamespace: progressNamespace, Backend: migrate.BackendClient, Seal: testSeal})
	if err != nil {
		t.Fatal(err)
	}
	want := stopWriters()

	if !res.Resumed || res.Counts.Done()-before == int64(n) {
		t.Errorf("the last run resumed=%v and did %d objects itself: it restarted instead of resuming", res.Resumed, res.Counts.Done()-before)
	}
	if res.Counts.Done() != int64(n) || res.Counts.Error != 0 {
		t.Errorf("counts %+v: %d objects done, want each of the %d counted exactly once", res.Counts, res.Counts.Done(), n)
	}
	t.Logf("final run: %+v in %s; writers made %d updates", res.Counts, res.Duration, updates())
	if p := progressObject(t, env); p.Attempts != int64(kills+1) || p.Phase != migrate.PhaseSucceeded {
		t.Errorf("progress phase %s attempts %d, want Succeeded after %d", p.Phase, p.Attempts, kills+1)
	}
	assertStoredIn(t, env, "fleet", "v1", n)
	if got := storedVersions(t, env); !slices.Equal(got, []string{"v1"}) {
		t.Errorf("storedVersions %v, want [v1]", got)
	}
	if got := uidsByName(t, env); !maps.Equal(got, uids) {
		t.Errorf("objects changed identity: %d now, %d before", len(got), len(uids))
	}
	lost := 0
	list := &v1.WidgetList{}
	if err := env.Client.List(ctx, list, client.InNamespace("fleet")); err != nil {
		t.Fatal(err)
	}
	for _, w := range list.Items {
		if got := w.Annotations[updatesAnnotation]; got != strconv.Itoa(want[w.Name]) && (got != "" || want[w.Name] != 0) {
			lost++
			if lost <= 5 {
				t.Errorf("%s: %s=%q, want %d: an update was lost", w.Name, updatesAnnotation, got, want[w.Name])
			}
		}
	}
	if lost > 0 {
		t.Errorf("%d objects lost updates", lost)
	}
}

// killInProcess runs the migrator until at least point objects are done, then cancels it.
func killInProcess(t *testing.T, m *migrate.Migrator, point int64) int64 {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var done int64
	_, err := m.Migrate(ctx, migrate.Options{CRD: crd.WidgetName, ProgressNamespace: progressNamespace, Backend: migrate.BackendClient,
		Seal: testSeal, ProgressInterval: 5 * time.Millisecond, OnProgress: func(s migrate.Status) {
			if s.Counts.Done() >= point && ctx.Err() == nil {
				done = s.Counts.Done()
				cancel()
			}
		}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("the migration ended with %v before it was cancelled at %d objects", err, point)
	}
	return done
}

// killChild runs the migrator in a child process and SIGKILLs it once it reports at least
// point objects done (it prints its live count, which is finer than the checkpoints).
func killChild(t *testing.T, env *testenv.Env, point int64) int64 {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestMigrateChildProcess$")
	cmd.Env = append(os.Environ(), childKubeconfigEnv+"="+env.Kubeconfig)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stdout)
	for lines.Scan() {
		done, ok := strings.CutPrefix(lines.Text(), "done ")
		if !ok {
			continue
		}
		if n, _ := strconv.ParseInt(done, 10, 64); n >= point {
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()
			return n
		}
	}
	err = cmd.Wait()
	t.Fatalf("the child migrator exited (%v) before it was killed at %d objects", err, point)
	return 0
}

// TestMigrateChildProcess is the child migrator of TestCrashAndResume; on its own it does
// nothing.
func TestMigrateChildProcess(t *testing.T) {
	path := os.Getenv(childKubeconfigEnv)
	if path == "" {
		return
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = migrate.DefaultQPS, migrate.DefaultBurst
	m, err := migrate.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Migrate(context.Background(), migrate.Options{CRD: crd.WidgetName, ProgressNamespace: progressNamespace,
		Backend: migrate.BackendClient, Holder: "child", Seal: testSeal, ProgressInterval: 5 * time.Millisecond,
		OnProgress: func(s migrate.Status) { fmt.Printf("done %d\n", s.Counts.Done()) }})
	t.Fatalf("the child migrator finished (%v) instead of being killed", err)
}

// startWriters starts w writers that keep updating random objects through alternating
// versions, incrementing updatesAnnotation, until stop is called. stop returns how many
// updates each object received.
func startWriters(t *testing.T, env *testenv.Env, n, w int) (stop func() map[string]int, total func() int) {
	t.Helper()
	// The writers' requests are never cancelled: an update cancelled in flight may or may not
	// have been applied, and could not be counted.
	ctx := context.Background()
	var stopping atomic.Bool
	var mu sync.Mutex
	counts := map[string]int{}
	sum := 0
	var wg sync.WaitGroup
	errs := make(chan error, w)
	for k := range w {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(k), uint64(time.Now().UnixNano())))
			for !stopping.Load() {
				i := rng.IntN(n)
				name := "widget-" + pad5(i)
				var obj client.Object = &v1.Widget{}
				if rng.IntN(2) == 0 {
					obj = &v1alpha1.Widget{}
				}
				err := increment(ctx, env, obj, name)
				if apierrors.IsConflict(err) {
					continue // not applied: nothing to count
				}
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				counts[name]++
				sum++
				mu.Unlock()
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
	stop = func() map[string]int {
		stopping.Store(true)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("writer: %v", err)
		}
		return counts
	}
	total = func() int { mu.Lock(); defer mu.Unlock(); return sum }
	return stop, total
}

// increment reads an object and writes it back with updatesAnnotation + 1, with the
// resourceVersion it read as the precondition.
func increment(ctx context.Context, env *testenv.Env, obj client.Object, name string) error {
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "fleet", Name: name}, obj); err != nil {
		return err
	}
	a := obj.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	c, _ := strconv.Atoi(a[updatesAnnotation])
	a[updatesAnnotation] = strconv.Itoa(c + 1)
	obj.SetAnnotations(a)
	return env.Client.Update(ctx, obj)
}

func pad5(i int) string {
	s := strconv.Itoa(i)
	for len(s) < 5 {
		s = "0" + s
	}
	return s
}

func uidsByName(t *testing.T, env *testenv.Env) map[string]types.UID {
	t.Helper()
	list := &v1.WidgetList{}
	if err := env.Client.List(context.Background(), list, client.InNamespace("fleet")); err != nil {
		t.Fatal(err)
	}
	out := map[string]types.UID{}
	for _, w := range list.Items {
		out[w.Name] = w.UID
	}
	return out
}
