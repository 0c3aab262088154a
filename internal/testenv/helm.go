package testenv

import (
	"os"
	"os/exec"
	"testing"
)

// HelmOn returns a runner of a Helm CLI against env in namespace ns, with Helm's cache, config
// and data in a directory of the test's own and extraEnv (HELM_DRIVER=configmap, say) added.
// Upgrades and rollbacks keep every revision: tests roll back to their first.
func HelmOn(tb testing.TB, env *Env, ns string, extraEnv ...string) func(t *testing.T, helm string, args ...string) (string, error) {
	tb.Helper()
	home := tb.TempDir()
	return func(t *testing.T, helm string, args ...string) (string, error) {
		t.Helper()
		if args[0] == "upgrade" || args[0] == "rollback" {
			args = append(args, "--history-max", "0")
		}
		cmd := exec.CommandContext(t.Context(), helm, append([]string{"--kubeconfig", env.Kubeconfig, "--namespace", ns}, args...)...)
		cmd.Env = append(append(os.Environ(), "HELM_CACHE_HOME="+home+"/cache", "HELM_CONFIG_HOME="+home+"/config", "HELM_DATA_HOME="+home+"/data"), extraEnv...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
}
