//go:build envtest

package storageversion_test

import (
	"context"
	"errors"
	"net"
	"net/url"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/widgetry/widget-operator/api/v1alpha1"
	"github.com/widgetry/widget-operator/internal/apiservers"
	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/storageversion"
	"github.com/widgetry/widget-operator/internal/testenv"
	"github.com/widgetry/widget-operator/internal/testenv/widgetenv"
)

// TestWaitTwoAPIServers runs two kube-apiservers, A and B, on one etcd. The storage version
// flips through A while B is stopped (SIGSTOP): the wait must not return while B is stopped,
// must name B when it times out, and returns once B runs again; then a write through B lands
// in etcd in the new version. A write through B before the flip, in the old version, shows
// that reading etcd tells the two apart.
func TestWaitTwoAPIServers(t *testing.T) {
	// Not loopback (the endpoints refuse it), not served: AdvertisedConfig routes them.
	const advertiseA, advertiseB = "198.51.100.1", "198.51.100.2"
	env := widgetenv.StartWithConversionWebhook(t, "v1alpha1", testenv.Options{APIServerFlags: map[string]string{"advertise-address": advertiseA}})
	b := env.StartAPIServer(t, "127.0.0.2", advertiseB)
	u, err := url.Parse(b.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	addrA, addrB := net.JoinHostPort(advertiseA, u.Port()), net.JoinHostPort(advertiseB, u.Port())
	ctx := t.Context()
	cfg := env.AdvertisedConfig()
	throughB, err := client.New(b.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ha"}}); err != nil {
		t.Fatal(err)
	}

	// Each instance registers itself at start and then every 10s.
	var listed []string
	var listErr error
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		listed, listErr = apiservers.Instances(ctx, env.Client)
		return listErr == nil && slices.Equal(listed, []string{addrA, addrB}), nil
	}); err != nil {
		t.Fatalf("the endpoints list %q (%v), want %q", listed, listErr, []string{addrA, addrB})
	}
	res, err := storageversion.Wait(ctx, env.Client, cfg, crd.WidgetName, storageversion.Options{Interval: 200 * time.Millisecond})
	if err != nil {
		t.Fatalf("both instances on v1alpha1: %v", err)
	}
	if res.StorageVersion != "v1alpha1" || !slices.Equal(res.Addresses(), []string{addrA, addrB}) {
		t.Fatalf("result %+v", res)
	}
	if got := storedAPIVersion(t, env, throughB, "before-flip"); got != "widgetry.io/v1alpha1" {
		t.Fatalf("a write through B before the flip is stored as %q, want widgetry.io/v1alpha1", got)
	}

	if err := b.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	// One quick update: B stays in the endpoints until its lease (15s, renewed every 10s)
	// expires, and the wait must find it there.
	live := &apiextensionsv1.CustomResourceDefinition{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: crd.WidgetName}, live); err != nil {
		t.Fatal(err)
	}
	if err := crd.SetStorageVersion(live, "v1"); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Update(ctx, live); err != nil {
		t.Fatal(err)
	}

	const timeout = 10 * time.Second
	start := time.Now()
	res, err = storageversion.Wait(ctx, env.Client, cfg, crd.WidgetName, storageversion.Options{Timeout: timeout, Interval: 200 * time.Millisecond, RequestTimeout: 2 * time.Second})
	elapsed := time.Since(start)
	var lag *storageversion.LagError
	if !errors.As(err, &lag) {
		t.Fatalf("with B stopped (since %s before the wait): want a *LagError, got %v (result %+v)", start.Sub(stopped), err, res)
	}
	t.Logf("with B stopped, after %s: %v", elapsed.Round(time.Millisecond), err)
	if elapsed < timeout {
		t.Errorf("the wait returned after %s, before its timeout %s", elapsed, timeout)
	}
	if l := lag.Lagging(); len(l) != 1 || l[0].Address != addrB {
		t.Errorf("lagging %+v, want B (%s) alone", l, addrB)
	}
	if !strings.Contains(err.Error(), addrB) || strings.Contains(err.Error(), addrA) {
		t.Errorf("the error names %s only if it names B (%s) and not A (%s)", err, addrB, addrA)
	}
	if i := slices.IndexFunc(res.Instances, func(in storageversion.Instance) bool { return in.Address == addrA }); i < 0 || !res.Instances[i].Switched || res.Instances[i].Version != "v1" {
		t.Errorf("A: %+v, want switched to v1", res.Instances)
	}

	// Still stopped, B holds the wait; once it runs again, the wait returns. Asked by address
	// (Options.Instances): B may have dropped out of the endpoints meanwhile.
	type outcome struct {
		res *storageversion.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		r, err := storageversion.Wait(ctx, env.Client, cfg, crd.WidgetName, storageversion.Options{
			Instances: lag.Result.Addresses(), Timeout: 2 * time.Minute, Interval: 200 * time.Millisecond, RequestTimeout: 2 * time.Second})
		done <- outcome{r, err}
	}()
	select {
	case o := <-done:
		t.Fatalf("the wait returned with B stopped: %+v, %v", o.res, o.err)
	case <-time.After(3 * time.Second):
	}
	if err := b.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed := time.Now()
	o := <-done
	if o.err != nil {
		t.Fatalf("after SIGCONT: %v", o.err)
	}
	t.Logf("the wait returned %s after SIGCONT: %+v", time.Since(resumed).Round(time.Millisecond), o.res.Instances)
	for _, in := range o.res.Instances {
		if !in.Switched || in.Version != "v1" {
			t.Errorf("instance %+v, want switched to v1", in)
		}
	}

	if got := storedAPIVersion(t, env, throughB, "after-wait"); got != "widgetry.io/v1" {
		t.Errorf("a write through B after the wait is stored as %q, want widgetry.io/v1", got)
	}
}

// storedAPIVersion creates a v1alpha1 Widget through c and returns the apiVersion etcd holds
// it in.
func storedAPIVersion(t *testing.T, env *testenv.Env, c client.Client, name string) string {
	t.Helper()
	w := &v1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "ha", Name: name}, Spec: v1alpha1.WidgetSpec{Image: "srv:1"}}
	if err := c.Create(t.Context(), w); err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
	raw, err := widgetenv.NewEtcd(env).Get(t.Context(), widgetenv.WidgetKey("ha", name))
	if err != nil {
		t.Fatal(err)
	}
	return widgetenv.APIVersion(raw)
}
