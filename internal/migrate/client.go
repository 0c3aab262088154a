package migrate

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
)

// The client backend streams the CRD's objects through a pipeline:
//
//	lister (one goroutine): paged LIST of metadata only, in the request version
//	  -> workers (Concurrency): one no-op merge patch per object, carrying its resourceVersion
//	  -> checkpointer (one goroutine): records the continue token of the last page whose
//	     objects, and all earlier pages' objects, are done
//
// The lister runs up to a page ahead, so the workers never wait for a LIST; pages finish out
// of order but are checkpointed in order, so a resumed run never skips an object that was
// not done. A page with failed objects stops the checkpoint there (later pages still run),
// so the next run retries those objects.

// page is one LIST page in flight.
type page struct {
	index     int
	cont      string // continue token of the page after this one; "" for the last page
	lastKey   string // key of this page's last listed object
	remaining atomic.Int64
	migrated  atomic.Int64
	unchanged atomic.Int64
	conflict  atomic.Int64
	notFound  atomic.Int64
	errors    atomic.Int64
}

func (pg *page) counts() Counts {
	return Counts{Migrated: pg.migrated.Load(), Unchanged: pg.unchanged.Load(), Conflict: pg.conflict.Load(),
		NotFound: pg.notFound.Load(), Error: pg.errors.Load()}
}

type item struct {
	namespace, name, resourceVersion string
	pg                               *page
}

// objectKey orders objects as the apiserver lists them (by storage key: namespace, name).
func objectKey(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

// clientRun is the state of one client-backend run.
type clientRun struct {
	*run
	live     Counts // this run's outcomes so far, under liveMu
	liveMu   sync.Mutex
	total    atomic.Int64
	firstErr atomic.Pointer[error]
}

func (r *run) runClient(ctx context.Context) error {
	if r.t.viaStatus {
		r.log.Info("rewriting through the status subresource, which admission webhooks on the main resource do not see", "version", r.t.gvr.Version)
	} else {
		r.log.Info("rewriting through the main resource (the CRD has no status subresource): admission webhooks see every rewrite and can refuse it", "version", r.t.gvr.Version)
	}
	cr := &clientRun{run: r}
	cr.total.Store(r.p.Total)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	work := make(chan item, r.opts.PageSize)
	done := make(chan *page, 64)
	var workers sync.WaitGroup
	for range r.opts.Concurrency {
		workers.Go(func() {
			for it := range work {
				if ctx.Err() != nil {
					continue // drain: an item not done keeps its page from being checkpointed
				}
				cr.migrateOne(ctx, it, cancel)
				if it.pg.remaining.Add(-1) == 0 {
					done <- it.pg
				}
			}
		})
	}

	checkpointed := make(chan error, 1)
	go func() {
		// A failed write (e.g. another migrator took the progress object over) stops the run.
		checkpointed <- cr.checkpoint(ctx, done, cancel)
	}()
	stopReports := cr.reportPeriodically()

	listErr := cr.list(ctx, work, done)
	close(work)
	workers.Wait()
	close(done)
	cpErr := <-checkpointed
	stopReports()

	switch {
	case listErr != nil:
		return listErr
	case cpErr != nil:
		return cpErr
	case ctx.Err() != nil:
		if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
			return cause
		}
		return ctx.Err()
	}
	if n := cr.p.Counts.Error; n > 0 {
		first := "unknown"
		if e := cr.firstErr.Load(); e != nil {
			first = (*e).Error()
		}
		return fmt.Errorf("%d objects of CRD %s could not be rewritten (first: %s); storedVersions left unchanged; fix the cause and rerun, which retries from the first failed page", n, r.opts.CRD, first)
	}
	return nil
}

// list feeds every object of the resource into work, page by page, starting at the
// checkpoint. A continue token that expired (410 Gone: etcd compacted the revision it
// pinned) restarts the LIST from scratch, skipping the objects up to the last one already
// handed out: LIST returns objects ordered by key, and any object at or before that key was
// either handed out, or written (so encoded in the storage version) after it was listed.
func (cr *clientRun) list(ctx context.Context, work chan<- item, done chan<- *page) error {
	res := cr.m.meta.Resource(cr.t.gvr)
	cont, skipUpTo := cr.p.Continue, ""
	if cont == "" && cr.p.LastKey != "" {
		skipUpTo = cr.p.LastKey // resumed at a checkpoint whose token was not kept
	}
	lastKey, prevKey := cr.p.LastKey, "" // prevKey: the last key of this listing
	enqueued := cr.p.Counts.Done()
	for index := 0; ; {
		var list *metav1.PartialObjectMetadataList
		err := retryTransient(ctx, func() error {
			var err error
			list, err = res.List(ctx, metav1.ListOptions{Limit: cr.opts.PageSize, Continue: cont})
			return err
		})
		if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
			cr.log.Info("the LIST continue token expired; listing again from the start, skipping objects already handed out", "skipUpTo", lastKey)
			cont, skipUpTo, prevKey = "", lastKey, ""
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("list %s (page %d): %w", cr.t.gvr.GroupResource(), index+1, err)
		}

		pg := &page{index: index, cont: list.Continue, lastKey: lastKey}
		index++
		items := make([]item, 0, len(list.Items))
		for i := range list.Items {
			o := &list.Items[i]
			key := objectKey(o.Namespace, o.Name)
			if skipUpTo != "" && key < prevKey {
				// Skipping by key relies on LIST returning objects in key order (which continue
				// tokens rely on too). If it ever does not, skipping could miss objects that
				// still need rewriting, and the trim would then lose track of them.
				return fmt.Errorf("list %s: objects came out of key order (%s after %s), so objects already done cannot be skipped safely; delete the progress ConfigMap %s to start over, then rerun",
					cr.t.gvr.GroupResource(), key, prevKey, cr.store.ref())
			}
			pg.lastKey, prevKey = key, key
			if skipUpTo != "" && key <= skipUpTo {
				continue
			}
			items = append(items, item{namespace: o.Namespace, name: o.Name, resourceVersion: o.ResourceVersion, pg: pg})
		}
		lastKey = pg.lastKey
		if rem := list.GetRemainingItemCount(); rem != nil {
			cr.total.Store(enqueued + int64(len(items)) + *rem)
		} else if list.Continue == "" {
			cr.total.Store(enqueued + int64(len(items)))
		}
		enqueued += int64(len(items))
		pg.remaining.Store(int64(len(items)))
		if len(items) == 0 {
			done <- pg
		}
		for _, it := range items {
			select {
			case work <- it:
			case <-ctx.Done():
				return nil
			}
		}
		if list.Continue == "" {
			return nil
		}
		cont = list.Continue
	}
}

// migrateOne rewrites one object: an empty merge patch that carries the listed
// resourceVersion, so the apiserver decodes the object, encodes it in the storage version and
// writes it only if the bytes differ, and refuses with a Conflict if the object changed since
// we listed it (then the other write re-encoded it: nothing to do). It goes through the
// status subresource when the CRD has one (target.viaStatus).
func (cr *clientRun) migrateOne(ctx context.Context, it item, stop context.CancelCauseFunc) {
	patch := fmt.Appendf(nil, `{"metadata":{"resourceVersion":%q}}`, it.resourceVersion)
	var sub []string
	if cr.t.viaStatus {
		sub = []string{"status"}
	}
	var got *metav1.PartialObjectMetadata
	err := retryTransient(ctx, func() error {
		var err error
		got, err = cr.m.meta.Resource(cr.t.gvr).Namespace(it.namespace).
			Patch(ctx, it.name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager}, sub...)
		return err
	})
	switch {
	case err == nil:
		it.pg.migrated.Add(1)
		cr.add(func(c *Counts) { c.Migrated++ })
		if got.ResourceVersion == it.resourceVersion {
			it.pg.unchanged.Add(1)
			cr.add(func(c *Counts) { c.Unchanged++ })
		}
	case apierrors.IsConflict(err):
		it.pg.conflict.Add(1)
		cr.add(func(c *Counts) { c.Conflict++ })
	case apierrors.IsNotFound(err):
		it.pg.notFound.Add(1)
		cr.add(func(c *Counts) { c.NotFound++ })
	case ctx.Err() != nil:
		// Interrupted: the object is not done, so neither is its page.
		it.pg.remaining.Add(1)
	default:
		it.pg.errors.Add(1)
		err = fmt.Errorf("rewrite %s %s: %w", cr.t.gvr.GroupResource(), objectKey(it.namespace, it.name), err)
		cr.firstErr.CompareAndSwap(nil, &err)
		n := int64(0)
		cr.add(func(c *Counts) { c.Error++; n = c.Error })
		if n <= 10 {
			cr.log.Error(err, "could not rewrite an object", "namespace", it.namespace, "name", it.name)
		}
		if n >= cr.opts.MaxErrors {
			stop(fmt.Errorf("%w: stopped after %d objects of CRD %s failed (last: %w); nothing was trimmed; fix the cause (is the conversion webhook up?) and rerun", errStopped, n, cr.opts.CRD, err))
		}
	}
}

func (cr *clientRun) add(f func(*Counts)) {
	cr.liveMu.Lock()
	f(&cr.live)
	cr.liveMu.Unlock()
}

func (cr *clientRun) snapshot() Status {
	cr.liveMu.Lock()
	c := cr.live
	cr.liveMu.Unlock()
	base := cr.baseCounts
	base.add(c)
	return Status{CRD: cr.opts.CRD, StorageVersion: cr.t.storage, Backend: BackendClient, Counts: base,
		Total: max(cr.total.Load(), base.Done()), Elapsed: time.Since(cr.start), DoneThisRun: c.Done(), Resumed: cr.resumed}
}

// reportPeriodically calls OnProgress until the returned function is called.
func (cr *clientRun) reportPeriodically() (stop func()) {
	if cr.opts.OnProgress == nil {
		return func() {}
	}
	quit, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(cr.opts.ProgressInterval)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				cr.opts.OnProgress(cr.snapshot())
			}
		}
	}()
	return func() { close(quit); <-stopped }
}

// checkpointMinInterval bounds progress writes when pages finish faster than this.
const checkpointMinInterval = 500 * time.Millisecond

// checkpoint advances the progress object over pages finished in order, until done is
// closed. Its writes use their own context so that the last checkpoint of an interrupted
// run is still recorded.
func (cr *clientRun) checkpoint(ctx context.Context, done <-chan *page, stop context.CancelCauseFunc) error {
	finished := map[int]*page{}
	next, frozen, dirty := 0, false, false
	var lastWrite time.Time
	var firstErr error
	write := func() {
		if !dirty || firstErr != nil {
			return
		}
		cr.p.Total = max(cr.total.Load(), cr.p.Counts.Done())
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := cr.store.save(wctx, &cr.p); err != nil {
			firstErr = err
			stop(err)
			return
		}
		dirty, lastWrite = false, time.Now()
	}
	for pg := range done {
		finished[pg.index] = pg
		for !frozen {
			pg, ok := finished[next]
			if !ok {
				break
			}
			delete(finished, next)
			next++
			c := pg.counts()
			cr.p.Counts.add(c)
			cr.p.LastProgressTime = time.Now()
			dirty = true
			if c.Error > 0 {
				// Resume here: the failed objects of this page must be retried.
				frozen = true
				break
			}
			cr.p.Continue, cr.p.LastKey = pg.cont, pg.lastKey
		}
		if time.Since(lastWrite) >= checkpointMinInterval {
			write()
		}
	}
	write()
	return firstErr
}

// retryTransient retries f on errors that say "try again" (timeouts, 5xx, dropped
// connections) a few times with backoff. 429 Too Many Requests is retried by client-go
// itself, honouring Retry-After. Conflict and NotFound are answers, never retried.
func retryTransient(ctx context.Context, f func() error) error {
	backoff := wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Steps: 4, Jitter: 0.2}
	var err error
	for {
		err = f()
		if err == nil || !isTransient(err) || backoff.Steps <= 1 {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(backoff.Step()):
		}
	}
}

func isTransient(err error) bool {
	return apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || apierrors.IsTooManyRequests(err) ||
		apierrors.IsServiceUnavailable(err) || apierrors.IsInternalError(err) || apierrors.IsUnexpectedServerError(err) ||
		utilnet.IsConnectionReset(err) || utilnet.IsProbableEOF(err) || utilnet.IsHTTP2ConnectionLost(err)
}
