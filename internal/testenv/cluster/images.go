package cluster

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// SampleServerImage is the reference of the sample HTTP server image (scripts/tools/mkimage/
// sample-server): / , /healthz, /readyz (after --ready-after), /metrics and /whoami.
const SampleServerImage = "localhost/widget-cluster/sample-server:v1"

// BuildImage packs files (SRC or SRC:DEST, see scripts/tools/mkimage) into a from-scratch
// image tagged ref, written to the test's temporary directory; it returns the tarball.
func BuildImage(tb testing.TB, bin, ref string, args ...string) string {
	tb.Helper()
	out := filepath.Join(tb.TempDir(), strings.NewReplacer("/", "_", ":", "_").Replace(ref)+".tar")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmdArgs := append([]string{"-o", out, "-t", ref}, args...)
	if b, err := exec.CommandContext(ctx, filepath.Join(bin, "mkimage"), cmdArgs...).CombinedOutput(); err != nil {
		tb.Fatalf("cluster: mkimage %s: %v\n%s", strings.Join(cmdArgs, " "), err, b)
	}
	return out
}

// ImportSampleServer builds the sample server image from bin/sample-server, imports it
// into the node and returns its reference.
func (c *Cluster) ImportSampleServer(tb testing.TB) string {
	tb.Helper()
	tar := BuildImage(tb, c.Bin, SampleServerImage,
		"-label", "org.opencontainers.image.title=sample-server", "-port", "8080/tcp",
		filepath.Join(c.Bin, "sample-server")+":/sample-server")
	c.ImportImage(tb, tar)
	return SampleServerImage
}

// OperatorImageTarball is the operator's image (widget-manager and widgetctl) that
// `make image` writes to bin/.
const OperatorImageTarball = "widget-operator-image.tar"

// ImportOperatorImage imports the operator's image from bin/ into the node, failing the test
// with the make target to run when the tarball is missing.
func (c *Cluster) ImportOperatorImage(tb testing.TB) {
	tb.Helper()
	image := filepath.Join(c.Bin, OperatorImageTarball)
	if _, err := os.Stat(image); err != nil {
		tb.Fatalf("cluster: %s is missing: make image", image)
	}
	c.ImportImage(tb, image)
}
