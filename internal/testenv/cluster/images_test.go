//go:build envtest

package cluster_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/widgetry/widget-operator/internal/testenv/cluster"
	"github.com/widgetry/widget-operator/internal/testenv/prereq"
)

// TestBuildImage checks what bin/mkimage makes: a docker archive of a from-scratch image
// that runs as the non-root user with the given entrypoint and labels, its binary
// executable, the same digest for the same inputs. It needs no root.
func TestBuildImage(t *testing.T) {
	bin := filepath.Dir(prereq.Tool(t, "mkimage"))
	prereq.Tool(t, "sample-server")
	args := []string{"-label", "org.opencontainers.image.title=sample", "-port", "8080/tcp",
		filepath.Join(bin, "sample-server") + ":/bin/sample-server"}
	tarball := cluster.BuildImage(t, bin, "localhost/test/sample:v1", args...)
	files := readTar(t, tarball)

	var manifest []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	if err := json.Unmarshal(files["manifest.json"], &manifest); err != nil {
		t.Fatalf("manifest.json: %v", err)
	}
	if len(manifest) != 1 || !slices.Equal(manifest[0].RepoTags, []string{"localhost/test/sample:v1"}) || len(manifest[0].Layers) != 1 {
		t.Fatalf("manifest.json = %+v, want one image tagged localhost/test/sample:v1 with one layer", manifest)
	}
	var config struct {
		Architecture, OS string
		Config           struct {
			User       string
			Entrypoint []string
			Labels     map[string]string
		}
	}
	if err := json.Unmarshal(files[manifest[0].Config], &config); err != nil {
		t.Fatalf("config: %v", err)
	}
	if config.OS != "linux" || config.Config.User != "65532:65532" ||
		!slices.Equal(config.Config.Entrypoint, []string{"/bin/sample-server"}) ||
		config.Config.Labels["org.opencontainers.image.title"] != "sample" {
		t.Errorf("image config = %+v", config)
	}

	layer := files[manifest[0].Layers[0]]
	zr, err := gzip.NewReader(bytes.NewReader(layer))
	if err != nil {
		t.Fatalf("layer: %v", err)
	}
	modes := map[string]int64{}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		modes[h.Name] = h.Mode
	}
	if modes["bin/sample-server"] != 0o755 {
		t.Errorf("bin/sample-server mode %o, want 755 (layer: %v)", modes["bin/sample-server"], modes)
	}
	if _, ok := modes["etc/passwd"]; !ok {
		t.Errorf("no /etc/passwd naming the nonroot user in %v", modes)
	}

	again := readTar(t, cluster.BuildImage(t, bin, "localhost/test/sample:v1", args...))
	if string(again["manifest.json"]) != string(files["manifest.json"]) {
		t.Errorf("the same inputs gave a different image:\n%s\n%s", files["manifest.json"], again["manifest.json"])
	}
}

func readTar(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = b
	}
}
