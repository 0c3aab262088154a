package memlimit

import (
	"math"
	"runtime/debug"
	"testing"
)

func TestApply(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })

	debug.SetMemoryLimit(math.MaxInt64)
	if got := Apply(0.9); got != 0 {
		t.Fatalf("without GOMEMLIMIT: Apply = %d, want 0 (no limit)", got)
	}
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Fatalf("without GOMEMLIMIT the limit changed to %d", got)
	}

	debug.SetMemoryLimit(1000 << 20)
	if got, want := Apply(0.9), int64(900<<20); got != want {
		t.Fatalf("Apply(0.9) of 1000Mi = %d, want %d", got, want)
	}
	if got := debug.SetMemoryLimit(-1); got != 900<<20 {
		t.Fatalf("runtime limit %d, want %d", got, 900<<20)
	}
	if got := Apply(1); got != 900<<20 {
		t.Fatalf("ratio 1 changed the limit to %d", got)
	}
}
