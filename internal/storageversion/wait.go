// Package storageversion waits until every kube-apiserver instance of a cluster writes a
// CRD's objects in the CRD's storage version: the check between flipping the storage version
// and migrating the stored objects (internal/migrate).
//
// Each kube-apiserver switches the encoding of a CRD's objects when its own CRD informer sees
// the change, so with several instances (an HA control plane) one may still write the old
// version after the CRD update has returned. A migration running then could see objects
// rewritten in the old version behind it, and trimming status.storedVersions would lie
// about what etcd holds.
//
// Every instance is asked directly, at the address it registers in the endpoints of Service
// default/kubernetes, for its discovery document of the CRD's group-version. Its
// storageVersionHash is the hash of the version that instance encodes in: the instance builds
// both its discovery document and its storage for the CRD from the same CRD informer (it is
// what kube-storage-version-migrator watches too). The two are updated by separate handlers
// of that informer, each with its own queue: discovery can show the new hash while the
// storage still encodes the old version. The gap is usually milliseconds, but an instance
// that resumes after a stall (SIGSTOP, a paused VM) or runs starved was seen to publish the new
// hash first and then, a moment later, still write the old version (CI, TestWaitTwoAPIServers).
// So a switch counts only once the instance has reported it for Options.Settle, over at least
// two answers: the storage's handler has had that long to catch up with discovery's.
package storageversion

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/widgetry/widget-operator/internal/apiservers"
)

// Defaults of Options.
const (
	DefaultTimeout        = 2 * time.Minute
	DefaultInterval       = time.Second
	DefaultRequestTimeout = 5 * time.Second
	DefaultSettle         = 2 * time.Second
)

// ErrPrecondition marks a CRD that cannot be waited for: missing, without a storage version,
// or storing another version than Options.Version. The migration refuses the same cases.
var ErrPrecondition = errors.New("storage version precondition")

// Options tune Wait.
type Options struct {
	// Version is the storage version the caller expects; empty: the one the CRD names.
	Version string
	// Instances are host:port of every kube-apiserver instance, for when the addresses in the
	// endpoints are not reachable from here. Empty: the endpoints, read again at every poll
	// so that newcomers join; an instance that drops out of them stays waited for (stopped
	// longer than its lease, it drops out and may come back writing the old version).
	Instances []string
	// ServerName is the name each instance's serving certificate is verified for. Empty: the
	// rest config's TLS server name, else the host of its URL - the name clients reach the
	// control plane by (a load balancer's, the Service IP), which every instance's
	// certificate carries; kubernetes.default.svc is another such name.
	ServerName string
	// Timeout bounds the whole wait (DefaultTimeout), Interval is the pause between polls
	// (DefaultInterval), RequestTimeout bounds each request (DefaultRequestTimeout).
	Timeout, Interval, RequestTimeout time.Duration
	// Settle is how long an instance must keep reporting the storage version's hash before it
	// counts as switched (DefaultSettle): its storage follows its discovery document with a
	// lag of its own (see the package comment).
	Settle time.Duration
	// Logger receives one line per instance found and per instance switched.
	Logger logr.Logger
}

// Instance is what one kube-apiserver instance reported last.
type Instance struct {
	Address string `json:"address"`
	// Hash is its storageVersionHash for the CRD ("" if none answered), Version the CRD
	// version whose hash it is ("" if none is).
	Hash    string `json:"storageVersionHash,omitempty"`
	Version string `json:"version,omitempty"`
	// Switched: it writes in the storage version.
	Switched bool `json:"switched"`
	// Problem says why it has not switched.
	Problem string `json:"problem,omitempty"`
}

// tracked is an instance as the waiter follows it.
type tracked struct {
	Instance
	// reporting is when the instance first reported the storage version's hash in its
	// current run of such answers (zero: its last answer did not).
	reporting time.Time
}

// Result is what Wait waited for.
type Result struct {
	CRD            string `json:"crd"`
	StorageVersion string `json:"storageVersion"`
	Hash           string `json:"storageVersionHash"`
	// FromEndpoints: the instances come from the endpoints of Service default/kubernetes,
	// not from Options.Instances.
	FromEndpoints bool          `json:"fromEndpoints"`
	Instances     []Instance    `json:"instances"`
	Duration      time.Duration `json:"-"`
}

// Addresses are the instances' addresses.
func (r *Result) Addresses() []string {
	var out []string
	for _, in := range r.Instances {
		out = append(out, in.Address)
	}
	return out
}

// LagError is Wait's timeout: some instance has not reported the storage version's hash.
type LagError struct {
	Result  *Result
	Timeout time.Duration
}

// Lagging are the instances that have not switched.
func (e *LagError) Lagging() []Instance {
	var out []Instance
	for _, in := range e.Result.Instances {
		if !in.Switched {
			out = append(out, in)
		}
	}
	return out
}

func (e *LagError) Error() string {
	var b strings.Builder
	lagging := e.Lagging()
	fmt.Fprintf(&b, "after %s, %d of %d kube-apiserver instances do not write CRD %s as %s yet:",
		e.Timeout, len(lagging), len(e.Result.Instances), e.Result.CRD, e.Result.StorageVersion)
	for i, in := range lagging {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, " %s (%s)", in.Address, in.Problem)
	}
	if n := len(e.Result.Instances) - len(lagging); n > 0 {
		fmt.Fprintf(&b, "; %d switched", n)
	}
	if e.Result.FromEndpoints {
		fmt.Fprintf(&b, "; the addresses are those the instances registered in the endpoints of Service %s", apiservers.Service)
	}
	return b.String()
}

// Wait returns once every kube-apiserver instance reports, for the CRD, the storageVersionHash
// of the CRD's storage version (read once, at the start), or fails with a *LagError naming
// the instances that do not after opts.Timeout.
func Wait(ctx context.Context, c client.Reader, cfg *rest.Config, crdName string, opts Options) (*Result, error) {
	start := time.Now()
	opts = withDefaults(opts)
	w, err := newWaiter(ctx, c, cfg, crdName, opts)
	if err != nil {
		return nil, err
	}
	defer w.http.CloseIdleConnections()

	if len(opts.Instances) > 0 {
		w.add(opts.Instances)
	} else {
		w.res.FromEndpoints = true
		addrs, err := apiservers.Instances(ctx, c)
		if err != nil {
			return nil, err
		}
		if len(addrs) == 0 {
			return nil, fmt.Errorf("the Service %s lists no kube-apiserver: the apiservers run with --endpoint-reconciler-type=none, or none is up; name the instances explicitly", apiservers.Service)
		}
		w.add(addrs)
	}

	err = wait.PollUntilContextTimeout(ctx, opts.Interval, opts.Timeout, true, w.poll)
	w.res.Instances = w.snapshot()
	w.res.Duration = time.Since(start)
	switch {
	case err == nil:
		return w.res, nil
	case ctx.Err() != nil:
		return w.res, fmt.Errorf("wait for every kube-apiserver to write CRD %s as %s: %w", crdName, w.res.StorageVersion, ctx.Err())
	}
	return w.res, &LagError{Result: w.res, Timeout: opts.Timeout}
}

func withDefaults(o Options) Options {
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = DefaultRequestTimeout
	}
	if o.Settle <= 0 {
		o.Settle = DefaultSettle
	}
	if o.Logger.GetSink() == nil {
		o.Logger = logr.Discard()
	}
	return o
}

// waiter is the state of one Wait.
type waiter struct {
	c              client.Reader
	http           *http.Client
	log            logr.Logger
	path, resource string
	versions       map[string]string // hash -> CRD version, to name what a lagging instance writes
	res            *Result
	instances      map[string]*tracked
	settle         time.Duration
}

func newWaiter(ctx context.Context, c client.Reader, cfg *rest.Config, crdName string, opts Options) (*waiter, error) {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := c.Get(ctx, client.ObjectKey{Name: crdName}, crd); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("%w: CRD %s does not exist", ErrPrecondition, crdName)
		}
		return nil, fmt.Errorf("read CRD %s: %w", crdName, err)
	}
	w := &waiter{c: c, log: opts.Logger, versions: map[string]string{}, instances: map[string]*tracked{},
		res: &Result{CRD: crdName}, resource: crd.Status.AcceptedNames.Plural, settle: opts.Settle}
	if w.resource == "" {
		w.resource = crd.Spec.Names.Plural
	}
	group, kind := crd.Spec.Group, crd.Spec.Names.Kind
	var served string
	for _, v := range crd.Spec.Versions {
		w.versions[storageVersionHash(group, v.Name, kind)] = v.Name
		if v.Storage {
			w.res.StorageVersion = v.Name
		}
		// Every served version's discovery carries the same hash; prefer the storage version's.
		if v.Served && (served == "" || v.Storage) {
			served = v.Name
		}
	}
	switch {
	case w.res.StorageVersion == "":
		return nil, fmt.Errorf("%w: CRD %s marks no version as storage", ErrPrecondition, crdName)
	case opts.Version != "" && opts.Version != w.res.StorageVersion:
		return nil, fmt.Errorf("%w: CRD %s stores %s, not %s", ErrPrecondition, crdName, w.res.StorageVersion, opts.Version)
	case served == "":
		return nil, fmt.Errorf("%w: CRD %s serves no version", ErrPrecondition, crdName)
	}
	w.res.Hash = storageVersionHash(group, w.res.StorageVersion, kind)
	w.path = "/apis/" + group + "/" + served

	var err error
	if w.http, err = apiservers.HTTPClient(cfg, opts.ServerName, opts.RequestTimeout); err != nil {
		return nil, err
	}
	return w, nil
}

func (w *waiter) add(addrs []string) {
	for _, a := range addrs {
		if w.instances[a] == nil {
			w.instances[a] = &tracked{Instance: Instance{Address: a, Problem: "not asked yet"}}
			w.log.Info("waiting for kube-apiserver instance", "address", a, "crd", w.res.CRD, "storageVersion", w.res.StorageVersion)
		}
	}
}

// poll asks every instance that has not switched yet, all at once: a stalled instance costs
// one request timeout per poll, not one per instance.
func (w *waiter) poll(ctx context.Context) (bool, error) {
	if w.res.FromEndpoints {
		if addrs, err := apiservers.Instances(ctx, w.c); err == nil { // on error, the instances known so far
			w.add(addrs)
		}
	}
	var wg sync.WaitGroup
	for _, in := range w.instances {
		if !in.Switched {
			wg.Go(func() { w.ask(ctx, in) })
		}
	}
	wg.Wait()
	for _, in := range w.instances {
		if !in.Switched {
			return false, nil
		}
	}
	return true, nil
}

// ask reads one instance's discovery document of the CRD's group-version.
func (w *waiter) ask(ctx context.Context, in *tracked) {
	reporting := in.reporting
	in.reporting = time.Time{} // every answer but the storage version's hash ends the run
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+in.Address+w.path, nil)
	if err != nil {
		in.Problem = err.Error()
		return
	}
	req.Header.Set("Accept", "application/json")
	resp, err := w.http.Do(req)
	if err != nil {
		if ctx.Err() == nil { // at the deadline, keep what the instance said last
			in.Problem = "no answer: " + err.Error()
		}
		return
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	switch {
	case err != nil:
		in.Problem = "reading its answer: " + err.Error()
		return
	case resp.StatusCode == http.StatusNotFound:
		in.Problem = "does not serve " + w.path + " yet"
		return
	case resp.StatusCode != http.StatusOK:
		in.Problem = fmt.Sprintf("GET %s: HTTP %d: %.200s", w.path, resp.StatusCode, body)
		return
	}
	var list metav1.APIResourceList
	if err := json.Unmarshal(body, &list); err != nil {
		in.Problem = fmt.Sprintf("GET %s: not an APIResourceList: %v", w.path, err)
		return
	}
	i := slices.IndexFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == w.resource })
	if i < 0 {
		in.Problem = fmt.Sprintf("%s does not list %s yet", w.path, w.resource)
		return
	}
	in.Hash = list.APIResources[i].StorageVersionHash
	in.Version = w.versions[in.Hash]
	if in.Hash == w.res.Hash {
		now := time.Now()
		if reporting.IsZero() {
			reporting = now
		}
		in.reporting = reporting
		if held := now.Sub(reporting); held < w.settle {
			in.Problem = fmt.Sprintf("reports %s for %s; counts as switched once it has for %s (its storage follows its discovery)",
				w.res.StorageVersion, held.Round(time.Millisecond), w.settle)
			return
		}
		in.Switched, in.Problem = true, ""
		w.log.Info("kube-apiserver instance writes the storage version", "address", in.Address, "crd", w.res.CRD, "storageVersion", w.res.StorageVersion)
		return
	}
	switch {
	case in.Hash == "":
		in.Problem = "reports no storageVersionHash"
	case in.Version == "":
		in.Problem = fmt.Sprintf("writes storageVersionHash %s, of no version of the CRD", in.Hash)
	default:
		in.Problem = fmt.Sprintf("still writes %s (storageVersionHash %s, want %s)", in.Version, in.Hash, w.res.Hash)
	}
}

func (w *waiter) snapshot() []Instance {
	var out []Instance
	for _, a := range slices.Sorted(maps.Keys(w.instances)) {
		out = append(out, w.instances[a].Instance)
	}
	return out
}

// storageVersionHash is the storageVersionHash a kube-apiserver publishes in discovery for a
// resource stored as group/version, kind: k8s.io/apiserver's discovery.StorageVersionHash,
// copied because importing that package doubles widgetctl's size (gRPC, OpenTelemetry, CEL);
// TestStorageVersionHashIsUpstreams holds the copy to the original.
func storageVersionHash(group, version, kind string) string {
	sum := sha256.Sum256([]byte(group + "/" + version + "/" + kind))
	return base64.StdEncoding.EncodeToString(sum[:8])
}
