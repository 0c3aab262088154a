package testenv

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"testing"
)

const (
	// logDirEnv names a directory for the logs of failed tests, e.g. one that CI uploads.
	logDirEnv = "TESTENV_LOG_DIR"

	// tailLines is how much of each component log a failed test prints.
	tailLines = 25
)

// keepLogs copies the component logs in dir, which Cleanup is about to remove, to a new
// directory that stays, and writes its path and the end of each log to the test log.
func keepLogs(tb testing.TB, dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) == 0 {
		return
	}
	parent := os.Getenv(logDirEnv)
	if parent != "" {
		if err := os.MkdirAll(parent, 0o755); err != nil {
			tb.Logf("testenv: cannot create $%s: %v", logDirEnv, err)
			parent = ""
		}
	}
	kept, err := os.MkdirTemp(parent, "testenv-"+safeName(tb.Name())+"-")
	if err != nil {
		tb.Logf("testenv: cannot keep the component logs: %v", err)
		kept = ""
	}

	names := make([]string, 0, len(entries))
	for _, entry := range entries {
		if entry.Type().IsRegular() {
			names = append(names, entry.Name())
		}
	}
	sort.Strings(names)
	for _, name := range names {
		src := filepath.Join(dir, name)
		if kept != "" {
			if err := copyFile(filepath.Join(kept, name), src); err != nil {
				tb.Logf("testenv: keeping %s: %v", name, err)
			}
		}
		tb.Logf("testenv: last lines of %s:\n%s", name, tailFile(src, tailLines))
	}
	if kept != "" {
		tb.Logf("testenv: component logs kept in %s", kept)
	}
}

// safeName turns a test name such as "TestX/sub case" into a file-name fragment.
func safeName(name string) string {
	return regexp.MustCompile(`[^A-Za-z0-9_.-]+`).ReplaceAllString(name, "_")
}

func copyFile(dst, src string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}

// tailFile returns the last n lines of the file at path, or a note saying why it cannot.
func tailFile(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	return tail(data, n)
}

// tail returns the last n lines of data.
func tail(data []byte, n int) string {
	data = bytes.TrimRight(data, "\n")
	if len(data) == 0 {
		return "(empty)"
	}
	lines := bytes.Split(data, []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
