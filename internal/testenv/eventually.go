package testenv

import (
	"testing"
	"time"
)

// Eventually calls check every 100ms until it returns nil, and fails the test with the last
// error when timeout passes first.
func Eventually(tb testing.TB, timeout time.Duration, what string, check func() error) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s: not within %s: %v", what, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
