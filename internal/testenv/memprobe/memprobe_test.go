package memprobe

import (
	"os"
	"testing"
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
}
