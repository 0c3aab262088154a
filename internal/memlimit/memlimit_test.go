package memlimit

import (
	"math"
	"os"
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

func TestSetGCPercent(t *testing.T) {
	before := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(before) })

	t.Setenv("GOGC", "")
	os.Unsetenv("GOGC")
	if got := SetGCPercent(50, false); got != 50 || debug.SetGCPercent(100) != 50 {
		t.Errorf("without GOGC: SetGCPercent(50) = %d, or the runtime's target is not 50", got)
	}
	t.Setenv("GOGC", "200")
	debug.SetGCPercent(200) // as the runtime read it at start
	if got := SetGCPercent(50, false); got != 200 || debug.SetGCPercent(200) != 200 {
		t.Errorf("with GOGC=200, the default 50 must not win: got %d", got)
	}
	if got := SetGCPercent(70, true); got != 70 || debug.SetGCPercent(100) != 70 {
		t.Errorf("an explicit 70 must win over GOGC=200: got %d", got)
	}
}
