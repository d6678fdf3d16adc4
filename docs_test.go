// The docs stand alone: every relative link in README.md and docs/ resolves
// to a file (and a heading, for #anchors), and nothing generated is tracked.
package toolfleet_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// mdLink matches a Markdown link's or image's target: [text](target).
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// docFiles are the Markdown files a reader can follow links from.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md"}
	err := filepath.WalkDir("docs", func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".md") {
			files = append(files, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestDocLinksResolve checks every relative link target and anchor.
func TestDocLinksResolve(t *testing.T) {
	t.Parallel()
	anchors := map[string]map[string]bool{} // file → its heading anchors
	anchorsOf := func(file string) map[string]bool {
		if a, ok := anchors[file]; ok {
			return a
		}
		b, err := os.ReadFile(file)
		if err != nil {
			return nil
		}
		a := map[string]bool{}
		seen := map[string]int{}
		for _, l := range prose(string(b)) {
			if !strings.HasPrefix(l, "#") {
				continue
			}
			s := slug(strings.TrimLeft(l, "# "))
			if n := seen[s]; n > 0 {
				a[s+"-"+strconv.Itoa(n)] = true
			}
			seen[s]++
			a[s] = true
		}
		anchors[file] = a
		return a
	}
	for _, file := range docFiles(t) {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range prose(string(b)) {
			for _, m := range mdLink.FindAllStringSubmatch(stripCode(l), -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				path, anchor, _ := strings.Cut(target, "#")
				dest := file
				if path != "" {
					dest = filepath.Join(filepath.Dir(file), path)
					if _, err := os.Stat(dest); err != nil {
						t.Errorf("%s: link %q: no such file %s", file, target, dest)
						continue
					}
				}
				if anchor != "" && strings.HasSuffix(dest, ".md") && !anchorsOf(dest)[anchor] {
					t.Errorf("%s: link %q: %s has no heading #%s", file, target, dest, anchor)
				}
			}
		}
	}
}

// TestNothingGeneratedTracked: no bytecode, build output or binaries are in git.
func TestNothingGeneratedTracked(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("git", "ls-files", "-s").Output()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("git ls-files: %v", err)
		}
		t.Skipf("not a git checkout: %v", err) // a source tarball has nothing tracked to check
	}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		mode, path, _ := strings.Cut(l, " ")
		if i := strings.IndexByte(path, '\t'); i >= 0 {
			path = path[i+1:]
		}
		base := filepath.Base(path)
		switch {
		case strings.Contains(path, "__pycache__/"), strings.HasSuffix(base, ".pyc"), strings.HasSuffix(base, ".pyo"),
			strings.HasSuffix(base, ".test"), strings.HasSuffix(base, ".exe"), strings.HasSuffix(base, ".o"),
			strings.HasSuffix(base, ".so"), strings.Contains(path, "node_modules/"):
			t.Errorf("generated file tracked: %s", path)
		case mode == "100755" && !strings.HasSuffix(base, ".sh") && !strings.HasSuffix(base, ".py") && !isScript(path):
			t.Errorf("executable file tracked that is not a script: %s", path)
		}
	}
}

// isScript reports whether the tracked file starts with #!.
func isScript(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	b := make([]byte, 2)
	n, _ := f.Read(b)
	return n == 2 && string(b) == "#!"
}

// prose is the lines of a Markdown document outside fenced code blocks.
func prose(doc string) []string {
	var out []string
	fenced := false
	for _, l := range strings.Split(doc, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			out = append(out, l)
		}
	}
	return out
}

// stripCode removes inline code spans from a line.
func stripCode(l string) string {
	var b strings.Builder
	in := false
	for _, r := range l {
		if r == '`' {
			in = !in
			continue
		}
		if !in {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// slug is GitHub's anchor of a heading: lower case, letters, digits, - and _
// kept, spaces to -, everything else dropped.
func slug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(h)) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}
