// Command mkimage packs static binaries into a from-scratch container image and writes it as
// a docker-archive tarball (the format `ctr images import`, `docker load` and
// `kind load image-archive` read), without a docker engine or a registry.
//
// The image has one layer: the given files, /etc/passwd and /etc/group naming the non-root
// user (65532, "nonroot", as distroless does) and a world-writable /tmp. Every timestamp is
// the Unix epoch, so the same inputs give the same image digest.
//
// Usage:
//
//	mkimage -o OUT.tar -t REF [-entrypoint /bin/x] [-cmd ARG]... [-user 65532:65532]
//	        [-label K=V]... [-env K=V]... [-port 8080/tcp]... SRC[:DEST]...
//
// SRC is a file on disk; DEST its absolute path in the image (default /<basename of SRC>).
// The pause image and the sample server image of the end-to-end cluster are made this way
// from ./pause and ./sample-server (see scripts/README.md).
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// multi is a repeatable string flag.
type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

func main() {
	var labels, envs, cmd, ports multi
	out := flag.String("o", "", "output tarball (required)")
	ref := flag.String("t", "", "image reference to tag it with, e.g. localhost/widget-operator:dev (required)")
	entrypoint := flag.String("entrypoint", "", "entrypoint path (default: DEST of the first file)")
	user := flag.String("user", "65532:65532", "user:group the image runs as")
	workdir := flag.String("workdir", "/", "working directory")
	arch := flag.String("arch", runtime.GOARCH, "image architecture")
	flag.Var(&cmd, "cmd", "default argument (repeatable)")
	flag.Var(&labels, "label", "label K=V (repeatable)")
	flag.Var(&envs, "env", "environment K=V (repeatable)")
	flag.Var(&ports, "port", "exposed port, e.g. 8080/tcp (repeatable)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: mkimage -o OUT.tar -t REF [flags] SRC[:DEST]...\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *out == "" || *ref == "" || flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	if err := build(*out, *ref, *entrypoint, *user, *workdir, *arch, cmd, labels, envs, ports, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
}

type file struct{ src, dest string }

func parseFiles(args []string) ([]file, error) {
	var files []file
	for _, a := range args {
		src, dest, ok := strings.Cut(a, ":")
		if !ok {
			dest = "/" + filepath.Base(src)
		}
		if !path.IsAbs(dest) {
			return nil, fmt.Errorf("destination %q of %s must be an absolute path", dest, src)
		}
		files = append(files, file{src, path.Clean(dest)})
	}
	return files, nil
}

func parseKV(kind string, kvs []string) (map[string]string, error) {
	m := map[string]string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%s %q is not K=V", kind, kv)
		}
		m[k] = v
	}
	return m, nil
}

func build(out, refStr, entrypoint, user, workdir, arch string, cmd, labels, envs, ports, args []string) error {
	ref, err := name.ParseReference(refStr)
	if err != nil {
		return fmt.Errorf("parsing image reference %q: %w", refStr, err)
	}
	tag, ok := ref.(name.Tag)
	if !ok {
		return fmt.Errorf("image reference %q must be a tag, not a digest", refStr)
	}
	files, err := parseFiles(args)
	if err != nil {
		return err
	}
	labelMap, err := parseKV("label", labels)
	if err != nil {
		return err
	}
	if _, err := parseKV("env", envs); err != nil {
		return err
	}
	layerTar, err := layerTarball(files)
	if err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	})
	if err != nil {
		return fmt.Errorf("building the layer: %w", err)
	}
	img, err := mutate.Append(empty.Image, mutate.Addendum{
		Layer:   layer,
		History: v1.History{CreatedBy: "mkimage", Created: v1.Time{Time: time.Unix(0, 0).UTC()}},
	})
	if err != nil {
		return fmt.Errorf("appending the layer: %w", err)
	}
	if entrypoint == "" {
		entrypoint = files[0].dest
	}
	exposed := map[string]struct{}{}
	for _, p := range ports {
		exposed[p] = struct{}{}
	}
	cfg := v1.Config{
		Entrypoint:   []string{entrypoint},
		Cmd:          cmd,
		User:         user,
		WorkingDir:   workdir,
		Labels:       labelMap,
		Env:          append([]string{"PATH=/"}, envs...),
		ExposedPorts: exposed,
	}
	img, err = mutate.ConfigFile(img, &v1.ConfigFile{
		Architecture: arch,
		OS:           "linux",
		Created:      v1.Time{Time: time.Unix(0, 0).UTC()},
		Config:       cfg,
		RootFS:       mustConfig(img).RootFS,
		History:      mustConfig(img).History,
	})
	if err != nil {
		return fmt.Errorf("setting the image config: %w", err)
	}
	tmp := out + ".tmp"
	if err := tarball.WriteToFile(tmp, tag, img); err != nil {
		return fmt.Errorf("writing %s: %w", out, err)
	}
	if err := os.Rename(tmp, out); err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("%s %s %s\n", out, tag.String(), digest)
	return nil
}

func mustConfig(img v1.Image) *v1.ConfigFile {
	cf, err := img.ConfigFile()
	if err != nil {
		panic(err)
	}
	return cf
}

// layerTarball returns the single layer: the files, their parent directories, the nonroot
// user's passwd and group entries and /tmp.
func layerTarball(files []file) ([]byte, error) {
	epoch := time.Unix(0, 0).UTC()
	entries := map[string]*tar.Header{}
	contents := map[string][]byte{}
	addDirs := func(p string) {
		for d := path.Dir(p); d != "/"; d = path.Dir(d) {
			name := strings.TrimPrefix(d, "/") + "/"
			if _, ok := entries[name]; !ok {
				entries[name] = &tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: 0o755, ModTime: epoch, Format: tar.FormatPAX}
			}
		}
	}
	addFile := func(dest string, data []byte, mode int64) error {
		name := strings.TrimPrefix(dest, "/")
		if _, dup := entries[name]; dup {
			return fmt.Errorf("two files have the destination %s", dest)
		}
		addDirs(dest)
		entries[name] = &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)), ModTime: epoch, Format: tar.FormatPAX}
		contents[name] = data
		return nil
	}
	for _, f := range files {
		data, err := os.ReadFile(f.src)
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%s does not exist; build it first (e.g. `make build` for bin/widget-manager)", f.src)
		}
		if err != nil {
			return nil, err
		}
		if err := addFile(f.dest, data, 0o755); err != nil {
			return nil, err
		}
	}
	if err := addFile("/etc/passwd", []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"), 0o644); err != nil {
		return nil, err
	}
	if err := addFile("/etc/group", []byte("root:x:0:\nnonroot:x:65532:\n"), 0o644); err != nil {
		return nil, err
	}
	entries["tmp/"] = &tar.Header{Typeflag: tar.TypeDir, Name: "tmp/", Mode: 0o1777, ModTime: epoch, Format: tar.FormatPAX}
	entries["home/nonroot/"] = &tar.Header{Typeflag: tar.TypeDir, Name: "home/nonroot/", Mode: 0o700, Uid: 65532, Gid: 65532, ModTime: epoch, Format: tar.FormatPAX}
	entries["home/"] = &tar.Header{Typeflag: tar.TypeDir, Name: "home/", Mode: 0o755, ModTime: epoch, Format: tar.FormatPAX}

	names := make([]string, 0, len(entries))
	for n := range entries {
		names = append(names, n)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		if err := tw.WriteHeader(entries[n]); err != nil {
			return nil, err
		}
		if data, ok := contents[n]; ok {
			if _, err := tw.Write(data); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
