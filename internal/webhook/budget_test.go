package webhook

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestLimitsFor(t *testing.T) {
	for _, tc := range []struct {
		name                                    string
		memory, inFlight, conversion, admission int64
		want                                    Limits
		wantErr                                 string
	}{
		{name: "no memory limit: defaults, no budget", want: Limits{0, DefaultMaxConversionBodyBytes, DefaultMaxAdmissionBodyBytes}},
		{name: "the chart's default limit holds a 64Mi review", memory: 256 << 20 / 10 * 9,
			want: Limits{(256 << 20 / 10 * 9) / 10 * InFlightShare, 64 << 20, 6 << 20}},
		{name: "a small limit lowers the body limits", memory: 64 << 20,
			// 80%; the large requests' 7/8 of it /2.5; the admission default is below /5.
			want: Limits{53687088, 18790480, 6 << 20}},
		{name: "explicit values win", memory: 1 << 30, inFlight: 100 << 20, conversion: 10 << 20, admission: 1 << 20,
			want: Limits{100 << 20, 10 << 20, 1 << 20}},
		{name: "a body limit the budget cannot hold is refused", inFlight: 10 << 20, conversion: 8 << 20,
			wantErr: "--conversion-max-body-bytes=8388608 needs 20971520 bytes in flight"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := LimitsFor(tc.memory, tc.inFlight, tc.conversion, tc.admission)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("LimitsFor = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

// TestBudgetQueuesThenRefuses: requests beyond the budget wait for it, and one that waits
// longer than the wait gets a 503 naming the budget, counted by path.
func TestBudgetQueuesThenRefuses(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	b, err := NewInFlightBudget(1000, 200*time.Millisecond, reg)
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	entered := make(chan struct{}, 4)
	h := b.Limit("/convert", 2, 1000, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
	}))
	send := func(size int) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/convert", bytes.NewReader(make([]byte, size))))
		return rec
	}
	var wg sync.WaitGroup
	wg.Go(func() { send(400) }) // charged 800 of 1000
	<-entered
	if got := testutil.ToFloat64(b.inFlight); got != 800 {
		t.Errorf("in flight %v, want 800", got)
	}
	// 200 more fit; 300 (charged 600) do not, and time out.
	wg.Go(func() { send(100) })
	<-entered
	rec := send(300)
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "memory budget of 1000 bytes") {
		t.Errorf("over the budget: %d %q, want 503 naming the budget", rec.Code, rec.Body.String())
	}
	if got := testutil.ToFloat64(b.refused.WithLabelValues("/convert")); got != 1 {
		t.Errorf("refusals %v, want 1", got)
	}
	// A waiting request goes through once the budget frees.
	done := make(chan int)
	go func() { done <- send(300).Code }()
	time.Sleep(50 * time.Millisecond)
	close(release)
	if code := <-done; code != http.StatusOK {
		t.Errorf("a request that waited for the budget got %d", code)
	}
	wg.Wait()
	if got := testutil.ToFloat64(b.inFlight); got != 0 {
		t.Errorf("in flight after all answered: %v", got)
	}
}

// TestBudgetKeepsAReserveForSmallRequests: while large reviews hold the large requests'
// share and more wait for it, a single Widget's conversion goes through at once.
func TestBudgetKeepsAReserveForSmallRequests(t *testing.T) {
	b, err := NewInFlightBudget(16<<20, 300*time.Millisecond, prometheus.NewPedanticRegistry())
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	entered := make(chan int64, 8)
	h := b.Limit("/convert", 2, 64<<20, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- r.ContentLength
		if r.ContentLength > 1<<20 {
			<-release
		}
	}))
	send := func(size int) int {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/convert", bytes.NewReader(make([]byte, size))))
		return rec.Code
	}
	var wg sync.WaitGroup
	wg.Go(func() { send(7 << 20) }) // charged 14Mi: the large share (16Mi less the 2Mi reserve)
	<-entered
	if code := send(4 << 20); code != http.StatusServiceUnavailable {
		t.Errorf("a second large review got %d, want 503 after the wait", code)
	}
	for range 3 {
		if code := send(2 << 10); code != http.StatusOK {
			t.Errorf("a small review got %d while large ones held their share", code)
		}
	}
	close(release)
	wg.Wait()
}

func TestLimitBody(t *testing.T) {
	var read []byte
	h := LimitBody(10, "--admission-max-body-bytes", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var buf bytes.Buffer
		if _, err := buf.ReadFrom(r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		read = buf.Bytes()
	}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", strings.NewReader("0123456789abc")))
	if rec.Code != http.StatusRequestEntityTooLarge || !strings.Contains(rec.Body.String(), "--admission-max-body-bytes") || read != nil {
		t.Errorf("declared too large: %d %q (handler read %q)", rec.Code, rec.Body.String(), read)
	}
	// Undeclared length: cut off while read.
	req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader("0123456789abc"))
	req.ContentLength = -1
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "too large") {
		t.Errorf("undeclared, too large: %d %q", rec.Code, rec.Body.String())
	}
}

// TestFailureLogIsRateLimited: a flood of failures logs a burst, then counts what it drops
// and says so in the next line.
func TestFailureLogIsRateLimited(t *testing.T) {
	var lines []string
	l := NewFailureLog(funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{}), 1000, 3)
	l.limiter.SetLimit(0) // no refill during the test
	for range 10 {
		l.failed("object 1 (ns/a, widgetry.io/v1alpha1): spec: bad")
	}
	if len(lines) != 3 || !strings.Contains(lines[0], "ns/a") {
		t.Fatalf("logged %d lines, want the burst of 3 naming the object: %q", len(lines), lines)
	}
	l.limiter.SetLimit(1000)
	l.limiter.SetBurst(1)
	time.Sleep(5 * time.Millisecond)
	l.failed("next")
	if len(lines) != 4 || !strings.Contains(lines[3], `"suppressedSinceLastLine"=7`) {
		t.Fatalf("the line after the flood does not count the 7 dropped: %q", lines[len(lines)-1])
	}
}

// TestLargeRequestsLeaveAProcessor: large requests are handled at most GOMAXPROCS-1 at a time
// (one at least): another waits, then gets a 503 naming the processors, while a single
// Widget's review goes through at once.
func TestLargeRequestsLeaveAProcessor(t *testing.T) {
	b, err := NewInFlightBudget(256<<20, 300*time.Millisecond, prometheus.NewPedanticRegistry())
	if err != nil {
		t.Fatal(err)
	}
	b.largeWork = make(chan struct{}, 1) // as on a pod limited to two processors
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	h := b.Limit("/convert", 2, 64<<20, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > 1<<20 {
			entered <- struct{}{}
			<-release
		}
	}))
	send := func(size int) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/convert", bytes.NewReader(make([]byte, size))))
		return rec
	}
	var wg sync.WaitGroup
	wg.Go(func() { send(4 << 20) })
	<-entered
	if rec := send(4 << 20); rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "processor") {
		t.Errorf("a second large review while one is handled: %d %q, want 503 naming the processors", rec.Code, rec.Body.String())
	}
	if rec := send(2 << 10); rec.Code != http.StatusOK {
		t.Errorf("a small review while a large one is handled: %d", rec.Code)
	}
	close(release)
	wg.Wait()
	if rec := send(4 << 20); rec.Code != http.StatusOK {
		t.Errorf("a large review once the processor is free: %d", rec.Code)
	}
}
