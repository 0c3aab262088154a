package runbooks

import (
	"os"
	"path/filepath"
	"testing"
)

// A page's sh blocks come back whole and in order, a list item's indentation removed, other
// fenced blocks left out.
func TestBlocks(t *testing.T) {
	dir := t.TempDir()
	page := "# Page\n\n```sh\nNS=widget-system\nkubectl get pods   # comment kept\n```\n\n```\nError from server\n```\n\n1. Step:\n   ```sh\n   for w in a b; do\n     echo $w\n   done\n   ```\n"
	if err := os.WriteFile(filepath.Join(dir, "p.md"), []byte(page), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := Blocks(dir, "p.md")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"NS=widget-system\nkubectl get pods   # comment kept\n", "for w in a b; do\n  echo $w\ndone\n"}
	if len(got) != len(want) {
		t.Fatalf("got %d blocks %q, want %q", len(got), got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("block %d = %q, want %q", i, got[i], want[i])
		}
	}
}
