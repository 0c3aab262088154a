//go:build envtest

package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/widgetry/widget-operator/api/v1"
	"github.com/widgetry/widget-operator/internal/cli"
	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/migrate"
	"github.com/widgetry/widget-operator/internal/testenv"
	"github.com/widgetry/widget-operator/internal/testenv/widgetenv"
)

// run executes widgetctl with args against env and returns its exit code and output.
func run(t *testing.T, env *testenv.Env, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = cli.Execute(context.Background(), append([]string{"--kubeconfig", env.Kubeconfig}, args...), &out, &errOut)
	t.Logf("widgetctl %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out.String(), errOut.String())
	return code, out.String(), errOut.String()
}

// expectExit returns a runner of widgetctl against env that fails the test unless the exit
// code is code, and returns stdout and stderr together.
func expectExit(t *testing.T, env *testenv.Env) func(code int, args ...string) string {
	return func(code int, args ...string) string {
		t.Helper()
		got, stdout, stderr := run(t, env, args...)
		if got != code {
			t.Fatalf("widgetctl %s: exit %d, want %d\n%s%s", strings.Join(args, " "), got, code, stdout, stderr)
		}
		return stdout + stderr
	}
}

// setStage sets the CRD's flags of stage, as the chart's upgrade to it does, and at
// flip-storage waits until the apiserver writes v1.
func setStage(t *testing.T, env *testenv.Env, stage crd.Stage) {
	t.Helper()
	ctx := context.Background()
	live := &apiextensionsv1.CustomResourceDefinition{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: crd.WidgetName}, live); err != nil {
		t.Fatal(err)
	}
	if err := crd.ApplyStageFlags(live, stage); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Update(ctx, live); err != nil {
		t.Fatal(err)
	}
	if stage == crd.StageFlipStorage {
		widgetenv.WaitForStorageVersion(t, env, "v1", "widget-system")
	}
}

// migrateAll rewrites every Widget as the storage version and trims storedVersions, as the
// migrate hook does.
func migrateAll(t *testing.T, env *testenv.Env) {
	t.Helper()
	m, err := migrate.New(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Migrate(context.Background(), migrate.Options{CRD: crd.WidgetName, ProgressNamespace: "widget-system", Backend: migrate.BackendClient}); err != nil {
		t.Fatal(err)
	}
}

// TestMigrateCommand drives `widgetctl migrate` end to end: refusals exit 1 with the next
// step, errors exit 2, a migration exits 0 with its summary in text or JSON.
func TestMigrateCommand(t *testing.T) {
	const n = 200
	env := widgetenv.StartWithConversionWebhook(t, "v1alpha1", testenv.Options{})
	ctx := context.Background()
	for _, ns := range []string{"widget-system", "probe", "fleet"} {
		if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		w := &v1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: fmt.Sprintf("w-%03d", i)}, Spec: v1.WidgetSpec{Image: "srv:1"}}
		if err := env.Client.Create(ctx, w); err != nil {
			t.Fatal(err)
		}
	}

	// envtest's kube-apiserver advertises a host address it does not serve on: name it.
	u, err := url.Parse(env.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	instances := "--apiserver-instances=" + u.Host

	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"no --crd", []string{"migrate"}, cli.ExitRefused, `refused: --crd NAME is required`},
		{"unknown flag", []string{"migrate", "--crd", "widgets.widgetry.io", "--bogus"}, cli.ExitRefused, "unknown flag: --bogus"},
		{"unknown CRD", []string{"migrate", "--crd", "nothing.example.com"}, cli.ExitRefused, "refused: CRD nothing.example.com does not exist"},
		{"--to a version that is not the storage version", []string{"migrate", "--crd", "widgets.widgetry.io", "--to", "v1"}, cli.ExitRefused,
			"refused: CRD widgets.widgetry.io stores v1alpha1, not v1: make v1 the storage version first (kubectl patch crd widgets.widgetry.io --type=json -p"},
		{"--to a version the CRD does not have", []string{"migrate", "--crd", "widgets.widgetry.io", "--to", "v9"}, cli.ExitRefused,
			"refused: CRD widgets.widgetry.io has no version v9 (it has v1, v1alpha1): check --to"},
		{"bad backend", []string{"migrate", "--crd", "widgets.widgetry.io", "--backend", "magic", instances}, cli.ExitRefused, `unknown backend "magic"`},
		{"bad output", []string{"migrate", "--crd", "widgets.widgetry.io", "-o", "yaml"}, cli.ExitRefused, `--output "yaml": use text or json`},
		{"bad instance", []string{"migrate", "--crd", "widgets.widgetry.io", "--apiserver-instances", "127.0.0.1:6443/"}, cli.ExitRefused,
			`refused: --apiserver-instances "127.0.0.1:6443/": want host:port`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := run(t, env, tc.args...)
			if code != tc.code || !strings.Contains(stderr, tc.stderr) || strings.Contains(stderr, "goroutine ") {
				t.Errorf("exit %d, stderr %q; want exit %d and %q, no stack trace", code, stderr, tc.code, tc.stderr)
			}
		})
	}

	widgetenv.SetStorageVersion(t, env, "v1", "probe")

	t.Run("an instance that does not answer: refused, nothing rewritten", func(t *testing.T) {
		for _, tc := range []struct{ name, flag, want string }{
			{"named", "--apiserver-instances=127.0.0.1:1", "127.0.0.1:1 (no answer"},
			{"from the endpoints", "", "the addresses are those the instances registered in the endpoints of Service default/kubernetes"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				args := []string{"migrate", "--crd", "widgets.widgetry.io", "--progress-namespace", "widget-system", "--storage-version-wait-timeout=2s"}
				if tc.flag != "" {
					args = append(args, tc.flag)
				}
				code, _, stderr := run(t, env, args...)
				for _, w := range []string{"refused: after 2s, 1 of 1 kube-apiserver instances do not write CRD widgets.widgetry.io as v1 yet", tc.want,
					"Nothing was rewritten", "--apiserver-instances host:port", "--skip-storage-version-wait"} {
					if code != cli.ExitRefused || !strings.Contains(stderr, w) {
						t.Errorf("exit %d, stderr %q; want exit %d and %q", code, stderr, cli.ExitRefused, w)
					}
				}
				for key, apiVersion := range widgetenv.StoredAPIVersions(t, env) {
					if strings.HasPrefix(key, "fleet/") && apiVersion != "widgetry.io/v1alpha1" {
						t.Errorf("%s is stored as %s: rewritten", key, apiVersion)
					}
				}
			})
		}
	})

	t.Run("a missing progress namespace is an error", func(t *testing.T) {
		code, _, stderr := run(t, env, "migrate", "--crd", "widgets.widgetry.io", "--backend", "client", "--progress-namespace", "nowhere", instances)
		if code != cli.ExitError || !strings.Contains(stderr, `namespace "nowhere" does not exist; create it or pass another --progress-namespace`) {
			t.Errorf("exit %d, stderr %q", code, stderr)
		}
	})

	t.Run("json", func(t *testing.T) {
		code, stdout, stderr := run(t, env, "migrate", "--crd", "widgets.widgetry.io", "--backend", "client", "--progress-namespace", "widget-system", "-o", "json", instances)
		if code != cli.ExitDone {
			t.Fatalf("exit %d", code)
		}
		var s struct {
			Result         string   `json:"result"`
			Objects        int64    `json:"objects"`
			Migrated       int64    `json:"migrated"`
			Conflicts      int64    `json:"conflicts"`
			Backend        string   `json:"backend"`
			StoredVersions []string `json:"storedVersions"`
			Rate           float64  `json:"objectsPerSecond"`
			Wait           struct {
				StorageVersion string `json:"storageVersion"`
				FromEndpoints  bool   `json:"fromEndpoints"`
				Instances      []struct {
					Address  string `json:"address"`
					Switched bool   `json:"switched"`
				} `json:"instances"`
			} `json:"storageVersionWait"`
		}
		if err := json.Unmarshal([]byte(stdout), &s); err != nil {
			t.Fatalf("stdout is not the JSON summary: %v", err)
		}
		if s.Result != "done" || s.Objects != n || s.Migrated != n || s.Backend != "client" || !slices.Equal(s.StoredVersions, []string{"v1"}) || s.Rate <= 0 {
			t.Errorf("summary %+v", s)
		}
		if w := s.Wait; w.StorageVersion != "v1" || w.FromEndpoints || len(w.Instances) != 1 || "--apiserver-instances="+w.Instances[0].Address != instances || !w.Instances[0].Switched {
			t.Errorf("storageVersionWait %+v", w)
		}
		// Not a terminal: structured JSON lines, ending with the final progress.
		if !strings.Contains(stderr, `"msg":"migration progress"`) || !strings.Contains(stderr, fmt.Sprintf(`"done":%d`, n)) {
			t.Errorf("stderr has no structured progress lines")
		}
	})

	t.Run("text, nothing to do", func(t *testing.T) {
		code, stdout, stderr := run(t, env, "migrate", "--crd", "widgets.widgetry.io", "--progress-namespace", "widget-system", "--skip-storage-version-wait")
		if code != cli.ExitDone || !strings.Contains(stdout, "nothing to migrate: CRD widgets.widgetry.io already stores only v1") {
			t.Errorf("exit %d stdout %q", code, stdout)
		}
		if !strings.Contains(stderr, "not checking that every kube-apiserver writes CRD widgets.widgetry.io in its storage version (--skip-storage-version-wait)") {
			t.Errorf("stderr %q does not say the wait was skipped", stderr)
		}
	})

	t.Run("text, reverse", func(t *testing.T) {
		widgetenv.SetStorageVersion(t, env, "v1alpha1", "probe")
		code, stdout, stderr := run(t, env, "migrate", "--crd", "widgets.widgetry.io", "--to", "v1alpha1", "--backend", "client", "--progress-namespace", "widget-system", instances)
		want := fmt.Sprintf("migrated CRD widgets.widgetry.io to v1alpha1 with the client backend: %d objects (%d rewritten, 0 already in v1alpha1), 0 conflicts, 0 not found, 0 errors in", n, n)
		if code != cli.ExitDone || !strings.Contains(stdout, want) || !strings.Contains(stdout, "storedVersions [v1alpha1]") {
			t.Errorf("exit %d stdout %q, want %q", code, stdout, want)
		}
		if w := "every kube-apiserver writes CRD widgets.widgetry.io as v1alpha1 (storageVersionHash "; !strings.Contains(stdout, w) || !strings.Contains(stdout, "(from --apiserver-instances)") {
			t.Errorf("stdout %q does not say what was waited for", stdout)
		}
		if !strings.Contains(stderr, "level=INFO msg=\"migration progress\"") {
			t.Errorf("stderr has no structured progress lines")
		}
	})
}
