package memprobe

import (
	"net/http"
	"net/http/httptest"
	"net/http/pprof"
	"os"
	"runtime"
	"testing"
	"time"
)

var sink []byte

func TestPeakHeapSeesATransientAllocation(t *testing.T) {
	const size = 32 << 20
	p := PeakHeap(func() {
		sink = make([]byte, size)
		sink[size-1] = 1
		sink = nil // garbage once f returns: only a sample during f sees it
	})
	if p.Bytes < size || p.Samples < 1 {
		t.Errorf("peak %d bytes in %d samples, want at least %d", p.Bytes, p.Samples, size)
	}
}

func TestAllocatedCountsAllocations(t *testing.T) {
	before := Allocated()
	sink = make([]byte, 1<<20)
	sink = nil
	if d := Allocated() - before; d < 1<<20 {
		t.Errorf("Allocated grew by %d bytes over a 1 MiB allocation", d)
	}
}

func TestRSSOfThisProcess(t *testing.T) {
	rss, err := RSS(os.Getpid())
	if err != nil || rss < 1<<20 {
		t.Fatalf("RSS %d, %v; want at least 1 MiB", rss, err)
	}
	if _, err := RSS(-1); err == nil {
		t.Error("RSS of pid -1: no error")
	}
	anon, err := RSSAnon(os.Getpid())
	if err != nil || anon == 0 || anon >= rss+(1<<20) {
		t.Errorf("RssAnon %d, %v; want more than 0 and within VmRSS %d", anon, err, rss)
	}
}

// TestReadRemoteHeap reads this process's own heap through the real net/http/pprof handler:
// a live 16 MiB allocation is in it, and an endpoint without pprof is an error.
func TestReadRemoteHeap(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(pprof.Index))
	defer srv.Close()
	sink = make([]byte, 16<<20)
	h, err := ReadRemoteHeap(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if h.Alloc < 16<<20 || h.Inuse < h.Alloc {
		t.Errorf("remote heap %+v with 16 MiB live: want Alloc >= 16 MiB and Inuse >= Alloc", h)
	}
	runtime.KeepAlive(sink)
	sink = nil

	plain := httptest.NewServer(http.NotFoundHandler())
	defer plain.Close()
	if _, err := ReadRemoteHeap(plain.URL); err == nil {
		t.Error("an endpoint without pprof: no error")
	}
}

// TestCPUTimeOfThisProcess: burning CPU for a while shows in this process's CPU time.
func TestCPUTimeOfThisProcess(t *testing.T) {
	before, err := CPUTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for start := time.Now(); time.Since(start) < 300*time.Millisecond; {
		sink = make([]byte, 64)
	}
	after, err := CPUTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if d := after - before; d < 100*time.Millisecond {
		t.Errorf("CPU time grew by %s over 300 ms of busy loop", d)
	}
	if _, err := CPUTime(-1); err == nil {
		t.Error("CPU time of pid -1: no error")
	}
}
