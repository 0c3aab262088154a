// Package memlimit tunes the Go runtime's memory use for the manager: the soft memory limit,
// from the container's (which also sizes what the webhook server may hold), and the garbage
// collector's target.
//
// The chart passes the container's memory limit as GOMEMLIMIT through the downward API. The
// runtime honours GOMEMLIMIT as it starts, but a limit equal to the container's leaves no
// room for memory the Go heap does not account (goroutine stacks in flight, the kernel's page
// cache charged to the cgroup, cgo-free as this binary is): the kernel would kill the pod
// before the garbage collector reacts. So the manager lowers it to a fraction of itself.
package memlimit

import (
	"math"
	"os"
	"runtime/debug"
	"strconv"
)

// Apply multiplies the limit the runtime read from GOMEMLIMIT by ratio and returns the limit
// now in force, or 0 when there is none (GOMEMLIMIT unset: the runtime's limit is MaxInt64).
// A ratio outside (0, 1] leaves the limit as it is.
func Apply(ratio float64) int64 {
	current := debug.SetMemoryLimit(-1)
	if current == math.MaxInt64 {
		return 0
	}
	if ratio <= 0 || ratio >= 1 {
		return current
	}
	limited := int64(float64(current) * ratio)
	debug.SetMemoryLimit(limited)
	return limited
}

// DefaultGCPercent is the manager's garbage-collection target. Its heap is mostly long-lived:
// the controller's informer caches, which grow with the number of Widgets. At the runtime's
// default of 100 the process holds up to twice its live heap; at 50, one and a half times,
// for a collection about twice as often (measured with 10,000 Widgets: the README's
// "Benchmarks").
const DefaultGCPercent = 50

// SetGCPercent sets the garbage collector's target percentage (what GOGC sets) and returns
// the one in force. A GOGC environment variable wins over a percent that was not given
// explicitly, so an operator's GOGC keeps its meaning.
func SetGCPercent(percent int, explicit bool) int {
	if env, ok := os.LookupEnv("GOGC"); ok && !explicit {
		if n, err := strconv.Atoi(env); err == nil {
			return n
		}
		return -1 // "off", or what the runtime made of it
	}
	debug.SetGCPercent(percent)
	return percent
}
