// Package runbooks reads the shell blocks of the runbooks in runbooks/, so that tests run the
// commands on-call copies from them, as written.
package runbooks

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// Line is one command line of a sh block.
type Line struct {
	// File is the page's path relative to runbooks/, e.g. "alerts/WidgetWebhookDown.md".
	File string
	// Command is the line without a trailing "# comment".
	Command string
	// Assignments are the block's variable assignments (VAR=...) above the line, in order.
	Assignments []string
}

var assignment = regexp.MustCompile(`^[A-Z][A-Z0-9_]*=`)

// Placeholder matches the <things to fill in> of a command.
var Placeholder = regexp.MustCompile(`<[A-Za-z][A-Za-z0-9 _.-]*>`)

// Lines returns every line of every ```sh block of the pages under dir (runbooks/), in file
// order. Blank lines, comments and continued lines (ending in "\") are left out.
func Lines(dir string) ([]Line, error) {
	var out []Line
	pages := os.DirFS(dir)
	err := fs.WalkDir(pages, ".", func(rel string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(rel, ".md") {
			return err
		}
		f, err := pages.Open(rel)
		if err != nil {
			return err
		}
		defer f.Close()
		inBlock, continued := false, false
		var assigned []string
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if strings.HasPrefix(line, "```") {
				inBlock = !inBlock && strings.HasPrefix(line, "```sh")
				assigned, continued = nil, false
				continue
			}
			if !inBlock || line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			wasContinued := continued
			continued = strings.HasSuffix(line, "\\")
			if wasContinued || continued {
				continue
			}
			cmd := strings.TrimSpace(strings.SplitN(line, " # ", 2)[0])
			if assignment.MatchString(cmd) {
				assigned = append(assigned, cmd)
				continue
			}
			out = append(out, Line{File: rel, Command: cmd, Assignments: append([]string(nil), assigned...)})
		}
		return sc.Err()
	})
	return out, err
}

// Blocks returns the ```sh blocks of one page (path relative to runbooks/ under dir), in order,
// each as the text on-call copies: its lines as written, the list's indentation removed.
func Blocks(dir, page string) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(dir, page))
	if err != nil {
		return nil, err
	}
	var blocks []string
	var block []string
	indent, inBlock := "", false
	for _, line := range strings.Split(string(b), "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "```") {
			if inBlock {
				blocks = append(blocks, strings.Join(block, "\n")+"\n")
				block = nil
			}
			inBlock = !inBlock && strings.HasPrefix(trimmed, "```sh")
			indent = line[:len(line)-len(strings.TrimLeft(line, " "))]
			continue
		}
		if inBlock {
			block = append(block, strings.TrimPrefix(line, indent))
		}
	}
	return blocks, nil
}
