// Package memprobe measures memory for the benchmarks and tests: the peak Go heap while a
// function runs, the bytes this process has allocated, and the resident set size of a
// process. It is pure Go, so the unit tier can use it too.
package memprobe

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"time"
)

const (
	// heapObjectsMetric is the heap held by objects, live or dead and not yet swept: the
	// heap the process needs at that moment (HeapAlloc of runtime.MemStats), read without
	// the stop-the-world of ReadMemStats.
	heapObjectsMetric = "/memory/classes/heap/objects:bytes"
	// allocsMetric is the cumulative bytes allocated on the heap.
	allocsMetric = "/gc/heap/allocs:bytes"
)

// SampleInterval is how often PeakHeap reads the heap.
const SampleInterval = 100 * time.Microsecond

// Peak is what PeakHeap saw during one call.
type Peak struct {
	// Bytes is the highest heap seen during the call minus the heap before it (after a GC):
	// what the call added at its worst, garbage not yet collected included, since that is
	// memory the process must have.
	Bytes uint64
	// Samples is how many times the heap was read during the call. The runtime keeps no
	// high-water mark of the heap, so the peak is sampled: with GOMAXPROCS=1 the sampling
	// goroutine only runs when the scheduler preempts the call (about every 10 ms), and the
	// peak is then a lower bound.
	Samples int
	// Elapsed is how long the call took: with Samples, whether the sampler kept up (a call
	// of Elapsed gives it about Elapsed/SampleInterval chances; far fewer samples mean it
	// was starved, and the peak may be far too low).
	Elapsed time.Duration
}

// PeakHeap runs f while a goroutine reads the heap every SampleInterval, and returns the
// highest heap seen above the heap before f. It collects garbage first, so that the baseline
// is the live heap and f starts from the same state every time.
func PeakHeap(f func()) Peak {
	runtime.GC()
	base := read(heapObjectsMetric)
	stop, done := make(chan struct{}), make(chan Peak)
	go func() {
		s := []metrics.Sample{{Name: heapObjectsMetric}}
		t := time.NewTicker(SampleInterval)
		defer t.Stop()
		var p Peak
		for {
			metrics.Read(s)
			p.Bytes, p.Samples = max(p.Bytes, s[0].Value.Uint64()), p.Samples+1
			select {
			case <-stop:
				done <- p
				return
			case <-t.C:
				// A tick and stop may both be ready and select picks either: stop wins, so
				// that no reading taken after f returned is counted as one more sample.
				select {
				case <-stop:
					done <- p
					return
				default:
				}
			}
		}
	}()
	start := time.Now()
	f()
	// The heap as f returns, in case the sampler was starved of a CPU.
	last := read(heapObjectsMetric)
	elapsed := time.Since(start)
	close(stop)
	p := <-done
	p.Elapsed = elapsed
	p.Bytes = max(p.Bytes, last)
	if p.Bytes < base {
		p.Bytes = 0
	} else {
		p.Bytes -= base
	}
	return p
}

// Allocated is the bytes this process has allocated on the heap since it started; the
// difference of two readings is what happened in between (every goroutine's allocations).
func Allocated() uint64 { return read(allocsMetric) }

func read(name string) uint64 {
	s := []metrics.Sample{{Name: name}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// RSS returns the resident set size of process pid in bytes (VmRSS of /proc/PID/status):
// what counts against a container's memory limit. Linux only.
func RSS(pid int) (uint64, error) { return statusBytes(pid, "VmRSS") }

// RSSAnon returns the anonymous part of process pid's resident set in bytes (RssAnon of
// /proc/PID/status): its heap, stacks and runtime, without the pages of its executable
// (RssFile), which the kernel can drop and read back again under memory pressure.
func RSSAnon(pid int) (uint64, error) { return statusBytes(pid, "RssAnon") }

// statusBytes reads the line "field:   123456 kB" of /proc/PID/status, in bytes.
func statusBytes(pid int, field string) (uint64, error) {
	path := "/proc/" + strconv.Itoa(pid) + "/status"
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), field+":")
		if !ok {
			continue
		}
		kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %s %q: %w", path, field, rest, err)
		}
		return kb << 10, nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("%s has no %s line (a kernel thread or a zombie?)", path, field)
}

// userHZ is the unit of the CPU times in /proc/<pid>/stat: USER_HZ, 100 on every Linux
// architecture the kernel's ABI fixes it for.
const userHZ = 100

// CPUTime is the CPU time (user and system) a process has used so far.
func CPUTime(pid int) (time.Duration, error) {
	path := "/proc/" + strconv.Itoa(pid) + "/stat"
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	// "pid (comm) state ppid …": comm may hold spaces and parentheses, so the fields are
	// counted after its last ')'. utime and stime are fields 14 and 15.
	end := strings.LastIndexByte(string(data), ')')
	if end < 0 {
		return 0, fmt.Errorf("%s: unexpected format %.80q", path, data)
	}
	fields := strings.Fields(string(data[end+1:]))
	if len(fields) < 13 {
		return 0, fmt.Errorf("%s: unexpected format %.80q", path, data)
	}
	var ticks uint64
	for _, f := range fields[11:13] {
		n, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: CPU time %q: %w", path, f, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// RemoteHeap is what a process's pprof endpoint reports of its heap after a collection.
type RemoteHeap struct {
	// Alloc is the heap its live objects hold (runtime.MemStats.HeapAlloc right after a GC).
	Alloc uint64
	// Inuse is the heap in spans that hold objects (HeapInuse): Alloc plus fragmentation.
	Inuse uint64
}

// ReadRemoteHeap asks the net/http/pprof endpoint at base (say "http://127.0.0.1:6060") to
// collect garbage and report its runtime.MemStats, which the text form of its heap profile
// ends with: the live heap, apart from the garbage a process's RSS also holds.
func ReadRemoteHeap(base string) (RemoteHeap, error) {
	resp, err := http.Get(base + "/debug/pprof/heap?gc=1&debug=1")
	if err != nil {
		return RemoteHeap{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return RemoteHeap{}, fmt.Errorf("%s: HTTP %d", resp.Request.URL, resp.StatusCode)
	}
	var h RemoteHeap
	fields := map[string]*uint64{"HeapAlloc": &h.Alloc, "HeapInuse": &h.Inuse}
	s := bufio.NewScanner(resp.Body)
	s.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for s.Scan() {
		// "# HeapAlloc = 123456"
		name, value, ok := strings.Cut(strings.TrimPrefix(s.Text(), "# "), " = ")
		if dst := fields[name]; ok && dst != nil {
			if *dst, err = strconv.ParseUint(value, 10, 64); err != nil {
				return RemoteHeap{}, fmt.Errorf("%s: %q: %w", resp.Request.URL, s.Text(), err)
			}
			delete(fields, name)
		}
	}
	if err := s.Err(); err != nil {
		return RemoteHeap{}, err
	}
	if len(fields) > 0 {
		return RemoteHeap{}, fmt.Errorf("%s: no runtime.MemStats in the heap profile", resp.Request.URL)
	}
	return h, nil
}
