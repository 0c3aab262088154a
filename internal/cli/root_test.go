package cli

import (
	"bytes"
	"strings"
	"testing"
)

func TestRootTakesKubectlsConnectionFlags(t *testing.T) {
	g := &GlobalOptions{Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}}
	root := NewRootCommand(g)
	for _, name := range []string{"kubeconfig", "context", "namespace", "as", "as-group", "token", "server", "request-timeout"} {
		if root.PersistentFlags().Lookup(name) == nil {
			t.Errorf("widgetctl has no --%s", name)
		}
	}
	if f := root.PersistentFlags().ShorthandLookup("n"); f == nil || f.Name != "namespace" {
		t.Errorf("-n is %v, want --namespace", f)
	}
	// Every subcommand sees them (none shadows -n with a flag of its own).
	for _, cmd := range root.Commands() {
		if f := cmd.Flags().Lookup("namespace"); f != nil {
			t.Errorf("%s defines its own --namespace", cmd.Name())
		}
	}
	if err := root.ParseFlags([]string{"-n", "ops", "--server", "https://10.0.0.1:6443", "--token", "t0k3n", "--as", "alice", "--request-timeout", "7s"}); err != nil {
		t.Fatal(err)
	}
	rc, err := g.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	if rc.Host != "https://10.0.0.1:6443" || rc.BearerToken != "t0k3n" || rc.Impersonate.UserName != "alice" || rc.Timeout.String() != "7s" || g.Namespace() != "ops" || g.explicitNamespace() != "ops" {
		t.Fatalf("config %s token %q as %q timeout %s namespace %s: the flags did not reach the client", rc.Host, rc.BearerToken, rc.Impersonate.UserName, rc.Timeout, g.Namespace())
	}
}

func TestAsKubectlPlugin(t *testing.T) {
	for argv0, want := range map[string]bool{"/usr/local/bin/kubectl-widget": true, `C:\bin\kubectl-widget.exe`: false, "kubectl-widget.exe": true, "./widgetctl": false} {
		if got := asKubectlPlugin(argv0); got != want {
			t.Errorf("asKubectlPlugin(%q) = %v, want %v", argv0, got, want)
		}
	}
	var out bytes.Buffer
	g := &GlobalOptions{Stdout: &out, Stderr: &out}
	root := NewRootCommand(g)
	root.Annotations = map[string]string{"cobra_annotation_command_display_name": "kubectl widget"}
	root.SetArgs([]string{"--help"})
	if err := root.Execute(); err != nil || !strings.Contains(out.String(), "kubectl widget [command]") {
		t.Fatalf("help as a plugin: %v\n%s", err, out.String())
	}
}
