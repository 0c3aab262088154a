// Package memlimit sets the Go runtime's soft memory limit from the container's and sizes
// what the webhook server may hold from it.
//
// The chart passes the container's memory limit as GOMEMLIMIT through the downward API. The
// runtime honours GOMEMLIMIT as it starts, but a limit equal to the container's leaves no
// room for memory the Go heap does not account (goroutine stacks in flight, the kernel's page
// cache charged to the cgroup, cgo-free as this binary is): the kernel would kill the pod
// before the garbage collector reacts. So the manager lowers it to a fraction of itself.
package memlimit

import (
	"math"
	"runtime/debug"
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
