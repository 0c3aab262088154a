//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"testing"
)

// TestMain runs the tests, or, started by startEveryday, only the everyday load's process.
func TestMain(m *testing.M) {
	if spec, ok := os.LookupEnv(everydayEnv); ok {
		if err := runEveryday(spec); err != nil {
			fmt.Fprintln(os.Stderr, "everyday load:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}
