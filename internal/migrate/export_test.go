package migrate

import "testing"

// WithoutSeal lets unsealed checkpoints resume for the rest of t: the negative control of
// the seal (TestForgedCheckpointMakesAFullPass).
func WithoutSeal(t testing.TB) {
	requireSeal = false
	t.Cleanup(func() { requireSeal = true })
}
