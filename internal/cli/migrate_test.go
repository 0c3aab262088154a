//go:build envtest

package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/widgetry/widget-operator/api/v1"
	"github.com/widgetry/widget-operator/internal/cli"
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
		{"bad backend", []string{"migrate", "--crd", "widgets.widgetry.io", "--backend", "magic"}, cli.ExitRefused, `unknown backend "magic"`},
		{"bad output", []string{"migrate", "--crd", "widgets.widgetry.io", "-o", "yaml"}, cli.ExitRefused, `--output "yaml": use text or json`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := run(t, env, tc.args...)
			if code != tc.code || !strings.Contains(stderr, tc.stderr) || strings.Contains(stderr, "goroutine ") {
				t.Errorf("exit %d, stderr %q; want exit %d and %q, no stack trace", code, stderr, tc.code, tc.stderr)
			}
		})
	}

	widgetenv.SetStorageVersion(t, env, "v1", "probe")

	t.Run("a missing progress namespace is an error", func(t *testing.T) {
		code, _, stderr := run(t, env, "migrate", "--crd", "widgets.widgetry.io", "--backend", "client", "--progress-namespace", "nowhere")
		if code != cli.ExitError || !strings.Contains(stderr, `namespace "nowhere" does not exist; create it or pass another --progress-namespace`) {
			t.Errorf("exit %d, stderr %q", code, stderr)
		}
	})

	t.Run("json", func(t *testing.T) {
		code, stdout, stderr := run(t, env, "migrate", "--crd", "widgets.widgetry.io", "--backend", "client", "--progress-namespace", "widget-system", "-o", "json")
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
		}
		if err := json.Unmarshal([]byte(stdout), &s); err != nil {
			t.Fatalf("stdout is not the JSON summary: %v", err)
		}
		if s.Result != "done" || s.Objects != n || s.Migrated != n || s.Backend != "client" || !slices.Equal(s.StoredVersions, []string{"v1"}) || s.Rate <= 0 {
			t.Errorf("summary %+v", s)
		}
		// Not a terminal: structured JSON lines, ending with the final progress.
		if !strings.Contains(stderr, `"msg":"migration progress"`) || !strings.Contains(stderr, fmt.Sprintf(`"done":%d`, n)) {
			t.Errorf("stderr has no structured progress lines")
		}
	})

	t.Run("text, nothing to do", func(t *testing.T) {
		code, stdout, _ := run(t, env, "migrate", "--crd", "widgets.widgetry.io", "--progress-namespace", "widget-system")
		if code != cli.ExitDone || !strings.Contains(stdout, "nothing to migrate: CRD widgets.widgetry.io already stores only v1") {
			t.Errorf("exit %d stdout %q", code, stdout)
		}
	})

	t.Run("text, reverse", func(t *testing.T) {
		widgetenv.SetStorageVersion(t, env, "v1alpha1", "probe")
		code, stdout, stderr := run(t, env, "migrate", "--crd", "widgets.widgetry.io", "--to", "v1alpha1", "--backend", "client", "--progress-namespace", "widget-system")
		want := fmt.Sprintf("migrated CRD widgets.widgetry.io to v1alpha1 with the client backend: %d objects (%d rewritten, 0 already in v1alpha1), 0 conflicts, 0 not found, 0 errors in", n, n)
		if code != cli.ExitDone || !strings.Contains(stdout, want) || !strings.Contains(stdout, "storedVersions [v1alpha1]") {
			t.Errorf("exit %d stdout %q, want %q", code, stdout, want)
		}
		if !strings.Contains(stderr, "level=INFO msg=\"migration progress\"") {
			t.Errorf("stderr has no structured progress lines")
		}
	})
}
