package prereq

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRootIsTheMainModule(t *testing.T) {
	root, err := Root()
	if err != nil {
		t.Fatal(err)
	}
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(mod), "module "+ModulePath+"\n") {
		t.Errorf("Root() = %s, whose go.mod is not module %s", root, ModulePath)
	}
}

func TestNestedModuleIsNotTheRoot(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module "+ModulePath+"/scripts/tools/x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if isModuleRoot(dir) {
		t.Errorf("a go.mod of module %s/scripts/tools/x was taken for the repository root", ModulePath)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("// c\nmodule \""+ModulePath+"\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if !isModuleRoot(dir) {
		t.Errorf("a go.mod declaring module %q was not taken for the repository root", ModulePath)
	}
}

// TestMissingPrerequisitesFailNeverSkip: a missing tool, command or prerequisite fails the
// test with the command that provides it; none of them skips.
func TestMissingPrerequisitesFailNeverSkip(t *testing.T) {
	for _, tc := range []struct {
		name  string
		check func(testing.TB)
		want  string
	}{
		{"Tool", func(tb testing.TB) { Tool(tb, "no-such-tool") }, "make tools (or just this one: scripts/toolchain.sh no-such-tool)"},
		{"Command", func(tb testing.TB) { Command(tb, "no-such-command", "envtest") }, "scripts/prereqs.sh envtest"},
		{"Missing", func(tb testing.TB) { Missing(tb, "a thing", "make thing") }, "a thing is missing: run make thing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := Observe(tc.check)
			if out.Skipped {
				t.Fatal("the check skipped the test; a missing prerequisite must fail it")
			}
			if !strings.Contains(out.Fatal, tc.want) {
				t.Errorf("failure %q does not name %q", out.Fatal, tc.want)
			}
		})
	}
	if out := Observe(func(tb testing.TB) { Command(tb, "sh", "unit") }); out.Fatal != "" || out.Skipped {
		t.Errorf("Command(sh) failed although sh is on PATH: %+v", out)
	}
}
