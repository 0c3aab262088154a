package testenv

import "testing"

// The readiness criterion must not be fooled by the ping check that kube-controller-manager
// serves before its controllers are built.
func TestListsControllerChecks(t *testing.T) {
	for body, want := range map[string]bool{
		"[+]ping ok\nhealthz check passed\n": false,
		"healthz check passed\n":             false,
		"[+]garbage-collector-controller ok\n[+]deployment-controller ok\nhealthz check passed\n": true,
		"[-]garbage-collector-controller failed: reason withheld\nhealthz check failed\n":         false,
	} {
		if got := listsControllerChecks(body); got != want {
			t.Errorf("listsControllerChecks(%q) = %v, want %v", body, got, want)
		}
	}
}
