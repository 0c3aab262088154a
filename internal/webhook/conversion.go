package webhook

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	logf "sigs.k8s.io/controller-runtime/pkg/log"

	v1 "github.com/widgetry/widget-operator/api/v1"
	"github.com/widgetry/widget-operator/api/v1alpha1"
)

// This file is the ConversionReview envelope: the HTTP handling, decoding the review, splitting
// its objects over workers, and writing the response. Converting one object is in
// conversion_object.go.

const (
	conversionReviewAPIVersion = "apiextensions.k8s.io/v1"
	conversionReviewKind       = "ConversionReview"
	widgetKind                 = "Widget"
)

var (
	hubAPIVersion   = v1.GroupVersion.String()
	spokeAPIVersion = v1alpha1.GroupVersion.String()
)

// ConversionHandler serves the CRD conversion webhook for Widgets.
//
// It does not decode whole objects through a scheme: metadata and status (identical in every
// version) pass through as raw JSON, only spec is decoded and converted, with the same
// functions the typed converters use (internal/conversion). That keeps metadata byte-for-byte
// untouched (fields this binary does not know survive too) and makes large LISTs cheap.
//
// Memory: the body is read into one buffer of its declared length and checked as JSON, which
// allocates nothing; each object is then a span of that buffer, found without decoding it,
// converted in batches (on several goroutines for a LIST page) and written back over the
// body where the objects came from as long as they fit (they shrink on the way to v1), into a
// batch's own buffer from the first that does not; the batches are written to the connection
// as they are, never joined. A request holds at most its body and a response about as large,
// whatever its shape: see ConversionPeakFactor.
// Hostile shapes stop early: an element that is not an object fails the review at once,
// nesting beyond encoding/json's limit is refused, and the object count is capped.
type ConversionHandler struct {
	// MaxBodyBytes bounds the request body; zero means DefaultMaxConversionBodyBytes.
	MaxBodyBytes int64
	// Metrics records requests; nil records nothing.
	Metrics *ConversionMetrics
	// Log records failed conversions, at most a few per second; nil logs nothing.
	Log *FailureLog
}

// ConversionPeakFactor bounds the heap one ConversionReview holds, as a multiple of its body:
// the body, the response and the batch being converted (tests hold the handler to it for
// realistic and hostile reviews). The in-flight budget charges each request this much.
const ConversionPeakFactor = 2.5

// minObjectBytes is less than the smallest Widget the apiserver can send
// ({"apiVersion":"widgetry.io/v1","kind":"Widget","metadata":{"name":"a",…}}): a review of
// more objects than body/minObjectBytes cannot be real, and the cap keeps the per-object
// bookkeeping of a hostile body small.
const minObjectBytes = 64

// Batches: small reviews (single GETs, watch events) stay on the request's goroutine; a LIST
// page is converted by GOMAXPROCS workers, a batch at a time.
const (
	batchObjects = 128
	batchBytes   = 1 << 20
)

// ServeHTTP implements http.Handler.
func (h *ConversionHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	limit := h.MaxBodyBytes
	if limit <= 0 {
		limit = DefaultMaxConversionBodyBytes
	}
	fail := func(status int, err error) {
		h.Metrics.failure(failureReasonFor(status))
		h.Metrics.request(labelUnknown, labelUnknown, resultError, time.Since(start))
		h.Log.failed(err.Error(), "status", status)
		http.Error(w, err.Error(), status)
	}
	if status, err := checkConversionRequest(r, limit); err != nil {
		fail(status, err)
		return
	}
	body, err := readBody(w, r, limit)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			fail(http.StatusRequestEntityTooLarge, tooLargeError(limit))
			return
		}
		fail(http.StatusBadRequest, fmt.Errorf("read request body: %w", err))
		return
	}
	c := &converter{body: body, maxObjects: int(limit / minObjectBytes)}
	review, err := parseReview(body, c)
	if err != nil {
		fail(http.StatusBadRequest, fmt.Errorf("request body is not a ConversionReview: %w", err))
		return
	}
	if review.apiVersion != conversionReviewAPIVersion || review.kind != conversionReviewKind || !review.hasRequest {
		fail(http.StatusBadRequest, fmt.Errorf("expected a %s %s with a request, got apiVersion %q kind %q; list only %q in the CRD's conversionReviewVersions",
			conversionReviewAPIVersion, conversionReviewKind, review.apiVersion, review.kind, "v1"))
		return
	}

	to := versionLabel(review.desired)
	from, convErr := c.result()
	h.Metrics.review(c.count, len(body))
	result := resultSuccess
	if convErr != nil {
		result = resultFailure
		h.Metrics.failure(convErr.reason)
		h.Log.failed(convErr.message, "uid", review.uid, "desired", review.desired, "reason", convErr.reason)
	} else {
		h.Metrics.objects(from, to, c.count)
	}
	if n := c.degraded.Load(); n > 0 {
		h.Metrics.degradedObjects(reasonInvalidData, n)
		h.Log.degraded(n, c.degradedSample, "uid", review.uid, "desired", review.desired, "reason", reasonInvalidData)
	}
	h.Metrics.request(from, to, result, time.Since(start))
	writeResponse(w, review.uid, c, convErr)
}

// readBody takes the body the in-flight budget read whole (ArrivedBody), or reads it into one
// buffer of exactly its declared length (the apiserver always declares it), so reading wastes
// nothing; a body of unknown length grows a buffer up to the limit.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	if arrived, ok := r.Body.(*ArrivedBody); ok && int64(len(arrived.Bytes())) <= limit {
		return arrived.Bytes(), nil
	}
	body, contentLength := http.MaxBytesReader(w, r.Body, limit), r.ContentLength
	if contentLength >= 0 {
		buf := make([]byte, contentLength)
		if _, err := io.ReadFull(body, buf); err != nil {
			return nil, err
		}
		return buf, nil
	}
	var buf bytes.Buffer
	_, err := buf.ReadFrom(body)
	return buf.Bytes(), err
}

// checkConversionRequest refuses, before reading the body, what cannot be a ConversionReview
// or is declared larger than limit.
func checkConversionRequest(r *http.Request, limit int64) (int, error) {
	if r.Method != http.MethodPost {
		return http.StatusMethodNotAllowed, fmt.Errorf("method %s not allowed: a ConversionReview is POSTed", r.Method)
	}
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return http.StatusUnsupportedMediaType, errors.New("missing Content-Type: send application/json")
	}
	if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
		return http.StatusUnsupportedMediaType, fmt.Errorf("content type %q not supported: send application/json", ct)
	}
	if r.ContentLength > limit {
		return http.StatusRequestEntityTooLarge, tooLargeError(limit)
	}
	return 0, nil
}

func tooLargeError(limit int64) error {
	return fmt.Errorf("request body over %d bytes; raise the manager's --conversion-max-body-bytes (the chart derives it from the memory limit: raise resources.limits.memory)", limit)
}

// review is what the handler reads of an apiextensions.k8s.io/v1 ConversionReview; the
// objects went to the converter.
type review struct {
	apiVersion, kind string
	hasRequest       bool
	uid, desired     string
}

// parseReview reads the review from body and hands each object, a span of body, to c: no
// object is copied or decoded whole. Body is checked as JSON first (which costs no memory),
// so the spans can be taken without decoding. Members are matched case-sensitively and the
// last of duplicates wins, as the apiserver's own decoder does.
func parseReview(body []byte, c *converter) (review, error) {
	var rv review
	if !json.Valid(body) {
		// For the message only; decoding into an empty struct keeps nothing.
		err := json.Unmarshal(body, &struct{}{})
		if err == nil {
			err = errors.New("not valid JSON")
		}
		return rv, err
	}
	var request []byte
	var fieldErr error
	str := func(m member, into *string) {
		if s, ok := jsonString(m.value); ok || string(m.value) == "null" {
			*into = s
		} else if fieldErr == nil {
			fieldErr = fmt.Errorf("%s is not a string", m.key)
		}
	}
	if err := eachMember(body, func(m member) bool {
		switch string(m.key) {
		case `"apiVersion"`:
			str(m, &rv.apiVersion)
		case `"kind"`:
			str(m, &rv.kind)
		case `"request"`:
			request = m.value
		}
		return true
	}); err != nil {
		return rv, fmt.Errorf("the review is %s", strings.TrimPrefix(jsonKind(body), "it is "))
	}
	if request == nil || string(request) == "null" {
		return rv, fieldErr
	}
	rv.hasRequest = true
	var objects []byte
	if err := eachMember(request, func(m member) bool {
		switch string(m.key) {
		case `"uid"`:
			str(m, &rv.uid)
		case `"desiredAPIVersion"`:
			str(m, &rv.desired)
		case `"objects"`:
			objects = m.value
		}
		return true
	}); err != nil {
		return rv, fmt.Errorf("request is %s", strings.TrimPrefix(jsonKind(request), "it is "))
	}
	if fieldErr != nil {
		return rv, fieldErr
	}
	if c.setDesired(rv.desired) == nil {
		if err := eachElement(objects, c.add); err != nil {
			return rv, fmt.Errorf("request.objects is %s", strings.TrimPrefix(jsonKind(objects), "it is "))
		}
	}
	c.finish()
	return rv, nil
}

// conversionError is a failed conversion of one request, with a bounded metric reason.
type conversionError struct {
	reason  string
	message string
}

// converter converts a review's objects as they are decoded, in order, in batches. The first
// failure, in object order, fails the whole review: a partial success would make the apiserver
// drop objects from a LIST. Once a batch has failed, decoding stops.
type converter struct {
	body       []byte // the review; objects are spans of it
	maxObjects int
	desired    string
	count      int
	batches    []*batch
	current    *batch
	work       chan *batch
	workers    sync.WaitGroup
	failed     atomic.Bool
	// rejected is a failure found while decoding (an element that is not an object, too
	// many objects, an unsupported desired version), after every batch before it.
	rejected *conversionError
	// degraded counts the objects converted without data they held but could not be used;
	// degradedSample names the first few, for the log.
	degraded       atomic.Int64
	degradedMu     sync.Mutex
	degradedSample []string
}

// maxDegradedSample bounds the objects one review's log line names.
const maxDegradedSample = 5

// noteDegraded records that object raw was converted without data it could not use.
func (c *converter) noteDegraded(raw []byte, why string) {
	if c.degraded.Add(1) > maxDegradedSample {
		return
	}
	c.degradedMu.Lock()
	c.degradedSample = append(c.degradedSample, describeObject(raw)+": "+why)
	c.degradedMu.Unlock()
}

// batch is a run of consecutive objects and, once converted, their JSON.
type batch struct {
	first int    // index of the first object in the review
	spans []span // of the converter's body
	size  int
	// done: converted, every object of it. Its JSON is inPlace, then spill.
	done bool
	// inPlace is the converted objects that fit where the batch's input was: a prefix of the
	// batch's region of the body, written over objects already converted.
	inPlace []byte
	// spill is the rest, from the first object whose output outgrew the input consumed.
	spill []byte
	from  string
	err   *conversionError
}

func (c *converter) setDesired(desired string) error {
	if desired != hubAPIVersion && desired != spokeAPIVersion {
		c.rejected = &conversionError{reason: reasonUnsupportedVersion, message: fmt.Sprintf(
			"desiredAPIVersion %q is not supported: this webhook converts Widgets between %s and %s", desired, spokeAPIVersion, hubAPIVersion)}
		return errors.New(c.rejected.message)
	}
	c.desired = desired
	return nil
}

// add takes the next object and reports whether to go on. It refuses an element that is not
// an object at once, so an array of a million numbers costs one, and stops once a batch has
// failed.
func (c *converter) add(raw []byte) bool {
	if c.failed.Load() {
		return false
	}
	if i := skipSpace(raw, 0); i >= len(raw) || raw[i] != '{' {
		c.rejected = &conversionError{reason: reasonMalformed, message: fmt.Sprintf("object %d: not a JSON object, %s", c.count+1, jsonKind(raw))}
		return false
	}
	if c.count >= c.maxObjects {
		c.rejected = &conversionError{reason: reasonBodyTooLarge, message: fmt.Sprintf(
			"more than %d objects in one review; no Widget is smaller than %d bytes", c.maxObjects, minObjectBytes)}
		return false
	}
	if c.current == nil {
		c.current = &batch{first: c.count, spans: make([]span, 0, batchObjects)}
		c.batches = append(c.batches, c.current)
	}
	// raw is a subslice of body that runs to its end, so its offset is the difference of
	// their capacities.
	start := cap(c.body) - cap(raw)
	c.current.spans = append(c.current.spans, span{uint32(start), uint32(start + len(raw))})
	c.current.size += len(raw)
	c.count++
	if len(c.current.spans) >= batchObjects || c.current.size >= batchBytes {
		c.dispatch()
	}
	return true
}

// dispatch hands the current batch to the workers, starting them with the first full batch.
func (c *converter) dispatch() {
	b := c.current
	c.current = nil
	if c.work == nil {
		workers := runtime.GOMAXPROCS(0)
		c.work = make(chan *batch, workers)
		for range workers {
			c.workers.Go(func() {
				scratch := newObjectWriter(scratchBytes)
				for b := range c.work {
					c.convert(b, scratch)
				}
			})
		}
	}
	c.work <- b
}

// finish converts what is left and waits for the workers.
func (c *converter) finish() {
	if c.work == nil {
		// A small review: convert on the request's goroutine.
		scratch := newObjectWriter(scratchBytes)
		for _, b := range c.batches {
			c.convert(b, scratch)
		}
		return
	}
	if c.current != nil {
		c.dispatch()
	}
	close(c.work)
	c.workers.Wait()
}

// result is the source version label, or the first failure in object order.
func (c *converter) result() (string, *conversionError) {
	from := labelNone
	for i, b := range c.batches {
		if b.err != nil {
			return labelUnknown, b.err
		}
		if !b.done {
			break // not converted: decoding stopped before this batch was dispatched
		}
		from = mergeFrom(from, b.from, i == 0)
	}
	if c.rejected != nil {
		return labelUnknown, c.rejected
	}
	return from, nil
}

// panicLog records recovered panics.
var panicLog = logf.Log.WithName("conversion-webhook")

// convertOne converts one object; a variable only so that a test can make it panic.
var convertOne = convertObject

// convert converts one batch; it stops at its first failure. Each object's input is dropped
// once converted. scratch is the calling goroutine's own.
//
// It may run on a goroutine of its own, where net/http's recovery of the handler does not
// reach: a panic here would kill the process, and since the apiserver sends the same LIST
// to every replica, every replica in turn. A panic fails this review instead, naming the
// object, and the server goes on.
func (c *converter) convert(b *batch, scratch *objectWriter) {
	i := 0
	defer func() {
		if p := recover(); p != nil {
			b.err = &conversionError{reason: reasonPanic, message: fmt.Sprintf(
				"object %d (%s): internal error in the conversion webhook (a bug; the review failed, the server goes on): %v",
				b.first+i+1, describeObject(c.object(b, i)), p)}
			panicLog.Error(nil, "recovered a panic while converting; the review failed", "message", b.err.message)
			c.failed.Store(true)
		}
	}()
	// Each object is converted into scratch, then copied over the body where the batch's
	// input was, as long as the output so far fits in the input already consumed (objects
	// converted to v1 usually shrink: endpoints become a map, the conversion-data annotation
	// goes). The first object that does not fit, and every one after it, goes to spill. So a
	// review that shrinks costs its body and little more, and one that grows costs what it
	// did before: the body and a response about as large.
	pos := int(b.spans[0].start) // where the next converted object goes in the body
	var spill *bytes.Buffer
	b.from = labelNone
	for ; i < len(b.spans); i++ {
		scratch.Reset()
		if i > 0 {
			_ = scratch.WriteByte(',')
		}
		version, err := convertOne(scratch, c.desired, c.object(b, i))
		if err != nil {
			err.message = fmt.Sprintf("object %d (%s): %s", b.first+i+1, describeObject(c.object(b, i)), err.message)
			b.err = err
			c.failed.Store(true)
			return
		}
		if scratch.degraded != "" {
			c.noteDegraded(c.object(b, i), scratch.degraded)
			scratch.degraded = ""
		}
		b.from = mergeFrom(b.from, version, i == 0)
		converted := scratch.Bytes()
		// Object i has been read: the body up to its end is free.
		if spill == nil && pos+len(converted) <= int(b.spans[i].end) {
			pos += copy(c.body[pos:], converted)
			continue
		}
		if spill == nil {
			// The rest of the batch's input, with a slack for what conversion adds (an
			// empty spec to the smallest object, the conversion-data annotation), so the
			// buffer rarely regrows.
			rest := int(b.spans[len(b.spans)-1].end) - int(b.spans[i].start) // object i included
			spill = bytes.NewBuffer(make([]byte, 0, max(len(converted), rest+rest/16+64)))
		}
		spill.Write(converted)
	}
	b.inPlace = c.body[b.spans[0].start:pos:pos]
	if spill != nil {
		b.spill = spill.Bytes()
	}
	b.done = true
	b.spans = nil // converted: only the output is needed from here on
}

// scratchBytes is the first size of a worker's scratch buffer, which holds one converted
// object at a time (and grows to the largest).
const scratchBytes = 4 << 10

// span is where one object lies in the body: 8 bytes of bookkeeping per object, not a
// slice header's 24, since a review of minimal objects holds a span for each.
type span struct{ start, end uint32 }

func (c *converter) object(b *batch, i int) []byte {
	s := b.spans[i]
	return c.body[s.start:s.end:s.end]
}

// mergeFrom folds source-version labels: one version, or "mixed".
func mergeFrom(acc, next string, first bool) string {
	switch {
	case first || acc == labelNone:
		return next
	case next == labelNone || acc == next:
		return acc
	}
	return labelMixed
}

// describeObject names an object for an error message: namespace/name and apiVersion.
func describeObject(raw json.RawMessage) string {
	var o struct {
		APIVersion string `json:"apiVersion"`
		Metadata   struct {
			Namespace string `json:"namespace"`
			Name      string `json:"name"`
		} `json:"metadata"`
	}
	if json.Unmarshal(raw, &o) != nil {
		return "undecodable object"
	}
	return fmt.Sprintf("%s/%s, %s", o.Metadata.Namespace, o.Metadata.Name, o.APIVersion)
}

// writeResponse writes the ConversionReview response by hand: the converted objects are
// already JSON, and they go to the connection batch by batch, never copied into one buffer.
func writeResponse(w http.ResponseWriter, uid string, c *converter, convErr *conversionError) {
	uidJSON, _ := json.Marshal(uid)
	head := `{"apiVersion":"` + conversionReviewAPIVersion + `","kind":"` + conversionReviewKind + `","response":{"uid":` + string(uidJSON)
	w.Header().Set("Content-Type", "application/json")
	if convErr != nil {
		msg, _ := json.Marshal(convErr.message)
		body := head + `,"result":{"status":"Failure","reason":"BadRequest","code":400,"message":` + string(msg) + `},"convertedObjects":[]}}`
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = io.WriteString(w, body)
		return
	}
	head += `,"result":{"status":"Success"},"convertedObjects":[`
	const tail = `]}}`
	length := len(head) + len(tail)
	for i, b := range c.batches {
		if i > 0 {
			length++
		}
		length += len(b.inPlace) + len(b.spill)
	}
	w.Header().Set("Content-Length", strconv.Itoa(length))
	if _, err := io.WriteString(w, head); err != nil {
		return
	}
	for i, b := range c.batches {
		if i > 0 {
			if _, err := io.WriteString(w, ","); err != nil {
				return
			}
		}
		if _, err := w.Write(b.inPlace); err != nil {
			return
		}
		if _, err := w.Write(b.spill); err != nil {
			return
		}
		b.spill = nil // written: let it go while the rest is
	}
	_, _ = io.WriteString(w, tail)
}

func versionLabel(apiVersion string) string {
	switch apiVersion {
	case hubAPIVersion:
		return v1.GroupVersion.Version
	case spokeAPIVersion:
		return v1alpha1.GroupVersion.Version
	}
	return labelUnknown
}
