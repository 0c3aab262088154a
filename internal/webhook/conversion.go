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
	"sync"
	"time"

	logf "sigs.k8s.io/controller-runtime/pkg/log"

	v1 "github.com/widgetry/widget-operator/api/v1"
	"github.com/widgetry/widget-operator/api/v1alpha1"
)

// This file is the ConversionReview envelope: the HTTP handling, decoding the review, splitting
// its objects over workers, and writing the response. Converting one object is in
// conversion_object.go.

// DefaultMaxConversionBodyBytes bounds a ConversionReview body. It is large on purpose: the
// apiserver sends a whole LIST page — from its watch cache possibly the whole collection — in
// one review, so a small limit would break large lists.
const DefaultMaxConversionBodyBytes = 64 << 20

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
type ConversionHandler struct {
	// MaxBodyBytes bounds the request body; zero means DefaultMaxConversionBodyBytes.
	MaxBodyBytes int64
	// Metrics records requests; nil records nothing.
	Metrics *ConversionMetrics
}

// conversionReview is the part of an apiextensions.k8s.io/v1 ConversionReview the handler reads.
type conversionReview struct {
	APIVersion string             `json:"apiVersion"`
	Kind       string             `json:"kind"`
	Request    *conversionRequest `json:"request"`
}

type conversionRequest struct {
	UID               string            `json:"uid"`
	DesiredAPIVersion string            `json:"desiredAPIVersion"`
	Objects           []json.RawMessage `json:"objects"`
}

// ServeHTTP implements http.Handler.
func (h *ConversionHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	body, status, err := h.readBody(w, r)
	if err != nil {
		h.Metrics.failure(failureReasonFor(status))
		h.Metrics.request(labelUnknown, labelUnknown, resultError, time.Since(start))
		http.Error(w, err.Error(), status)
		return
	}
	var review conversionReview
	if err := json.Unmarshal(body, &review); err != nil {
		h.Metrics.failure(reasonMalformed)
		h.Metrics.request(labelUnknown, labelUnknown, resultError, time.Since(start))
		http.Error(w, fmt.Sprintf("request body is not a ConversionReview: %v", err), http.StatusBadRequest)
		return
	}
	if review.APIVersion != conversionReviewAPIVersion || review.Kind != conversionReviewKind || review.Request == nil {
		h.Metrics.failure(reasonMalformed)
		h.Metrics.request(labelUnknown, labelUnknown, resultError, time.Since(start))
		http.Error(w, fmt.Sprintf("expected a %s %s with a request, got apiVersion %q kind %q; list only %q in the CRD's conversionReviewVersions",
			conversionReviewAPIVersion, conversionReviewKind, review.APIVersion, review.Kind, "v1"), http.StatusBadRequest)
		return
	}

	req := review.Request
	out, from, convErr := convertObjects(req.DesiredAPIVersion, req.Objects, len(body))
	to := versionLabel(req.DesiredAPIVersion)
	result := resultSuccess
	if convErr != nil {
		result = resultFailure
		h.Metrics.failure(convErr.reason)
		if convErr.reason == reasonPanic {
			// Rare, and a bug: always logged, with the object it happened on.
			panicLog.Error(nil, "recovered a panic while converting; the review failed", "uid", req.UID, "desired", req.DesiredAPIVersion, "message", convErr.message)
		}
	} else {
		h.Metrics.objects(from, to, len(req.Objects))
	}
	h.Metrics.request(from, to, result, time.Since(start))

	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(encodeResponse(req.UID, out, convErr))
}

func (h *ConversionHandler) readBody(w http.ResponseWriter, r *http.Request) ([]byte, int, error) {
	if r.Method != http.MethodPost {
		return nil, http.StatusMethodNotAllowed, fmt.Errorf("method %s not allowed: a ConversionReview is POSTed", r.Method)
	}
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			return nil, http.StatusUnsupportedMediaType, fmt.Errorf("content type %q not supported: send application/json", ct)
		}
	} else {
		return nil, http.StatusUnsupportedMediaType, errors.New("missing Content-Type: send application/json")
	}
	limit := h.MaxBodyBytes
	if limit <= 0 {
		limit = DefaultMaxConversionBodyBytes
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("request body over %d bytes; raise the manager's --conversion-max-body-bytes", limit)
		}
		return nil, http.StatusBadRequest, fmt.Errorf("read request body: %w", err)
	}
	return body, 0, nil
}

// conversionError is a failed conversion of one request, with a bounded metric reason.
type conversionError struct {
	reason  string
	message string
}

// minObjectsPerWorker keeps small reviews (single GETs, watch events) on one goroutine.
const minObjectsPerWorker = 128

// convertObjects converts every object to desired, in order, into the JSON array of converted
// objects. Large reviews (a LIST page) are split over GOMAXPROCS goroutines, each converting a
// contiguous chunk into its own buffer. The first failure, in object order, fails the whole
// review: a partial success would make the apiserver drop objects from a LIST.
func convertObjects(desired string, objects []json.RawMessage, sizeHint int) ([]byte, string, *conversionError) {
	if desired != hubAPIVersion && desired != spokeAPIVersion {
		return nil, labelUnknown, &conversionError{reason: reasonUnsupportedVersion, message: fmt.Sprintf(
			"desiredAPIVersion %q is not supported: this webhook converts Widgets between %s and %s", desired, spokeAPIVersion, hubAPIVersion)}
	}
	workers := min(runtime.GOMAXPROCS(0), max(1, len(objects)/minObjectsPerWorker))
	chunks := make([]chunkResult, workers)
	var wg sync.WaitGroup
	for w := range workers {
		lo, hi := w*len(objects)/workers, (w+1)*len(objects)/workers
		wg.Go(func() { chunks[w] = convertChunk(desired, objects, lo, hi, sizeHint/workers) })
	}
	wg.Wait()

	out := make([]byte, 0, sizeHint+sizeHint/8+64)
	out = append(out, '[')
	from := labelNone
	for i, c := range chunks {
		if c.err != nil {
			return nil, labelUnknown, c.err
		}
		if c.buf.Len() == 0 {
			continue
		}
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = append(out, c.buf.Bytes()...)
		from = mergeFrom(from, c.from, i == 0)
	}
	return append(out, ']'), from, nil
}

type chunkResult struct {
	buf  bytes.Buffer
	from string
	err  *conversionError
}

// panicLog records recovered panics.
var panicLog = logf.Log.WithName("conversion-webhook")

// convertOne converts one object; a variable only so that a test can make it panic.
var convertOne = convertObject

// convertChunk converts objects[lo:hi]; it stops at its first failure.
//
// It runs on a goroutine of its own, where net/http's recovery of the handler does not
// reach: a panic here would kill the process, and since the apiserver sends the same LIST
// to every replica, every replica in turn. A panic fails this review instead, naming the
// object, and the server goes on.
func convertChunk(desired string, objects []json.RawMessage, lo, hi, sizeHint int) (r chunkResult) {
	i := lo
	defer func() {
		if p := recover(); p != nil {
			what := "before the first object"
			if i < len(objects) {
				what = fmt.Sprintf("object %d of %d (%s)", i+1, len(objects), describeObject(objects[i]))
			}
			r.err = &conversionError{reason: reasonPanic, message: fmt.Sprintf(
				"%s: internal error in the conversion webhook (a bug; the review failed, the server goes on): %v", what, p)}
		}
	}()
	r.buf.Grow(sizeHint + sizeHint/8)
	r.from = labelNone
	for ; i < hi; i++ {
		if i > lo {
			r.buf.WriteByte(',')
		}
		version, err := convertOne(&r.buf, desired, objects[i])
		if err != nil {
			err.message = fmt.Sprintf("object %d of %d (%s): %s", i+1, len(objects), describeObject(objects[i]), err.message)
			r.err = err
			return r
		}
		r.from = mergeFrom(r.from, version, i == lo)
	}
	return r
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

// encodeResponse writes the ConversionReview response by hand: the converted objects are
// already JSON and encoding/json would scan and compact all of them once more.
func encodeResponse(uid string, objects []byte, convErr *conversionError) []byte {
	uidJSON, _ := json.Marshal(uid)
	var b bytes.Buffer
	b.Grow(len(objects) + 256)
	b.WriteString(`{"apiVersion":"` + conversionReviewAPIVersion + `","kind":"` + conversionReviewKind + `","response":{"uid":`)
	b.Write(uidJSON)
	if convErr != nil {
		msg, _ := json.Marshal(convErr.message)
		b.WriteString(`,"result":{"status":"Failure","reason":"BadRequest","code":400,"message":`)
		b.Write(msg)
		b.WriteString(`},"convertedObjects":[]}}`)
		return b.Bytes()
	}
	b.WriteString(`,"result":{"status":"Success"},"convertedObjects":`)
	b.Write(objects)
	b.WriteString(`}}`)
	return b.Bytes()
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
