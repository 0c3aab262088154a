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
