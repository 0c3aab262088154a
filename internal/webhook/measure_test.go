package webhook

import (
	"bytes"
	"net/http"
	"net/http/httptest"

	"github.com/widgetry/widget-operator/internal/testenv/memprobe"
)

// Measuring a handler's memory, for the memory tests and the conversion benchmarks.

// countingWriter is a ResponseWriter that keeps the status, the first bytes of the body and
// its length: the response itself must not be what the test measures.
type countingWriter struct {
	header http.Header
	code   int
	head   []byte
	n      int
}

func newCountingWriter() *countingWriter { return &countingWriter{header: http.Header{}} }

func (w *countingWriter) Header() http.Header { return w.header }
func (w *countingWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}
func (w *countingWriter) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	if room := 4096 - len(w.head); room > 0 {
		w.head = append(w.head, p[:min(room, len(p))]...)
	}
	w.n += len(p)
	return len(p), nil
}

// serveMeasured sends body to h once and returns the answer and the peak heap it took.
func serveMeasured(h http.Handler, path string, body []byte) (*countingWriter, memprobe.Peak) {
	w := newCountingWriter()
	peak := memprobe.PeakHeap(func() {
		req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		h.ServeHTTP(w, req)
	})
	return w, peak
}
