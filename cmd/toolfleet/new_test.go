package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runNew(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRootCommand()
	var out strings.Builder
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(append([]string{"new", "toolkit"}, args...))
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

func TestNewToolkit(t *testing.T) {
	t.Parallel()
	// A bad name is refused with what a good one looks like, and nothing is written.
	dir := filepath.Join(t.TempDir(), "x")
	if _, err := runNew(t, "My-Tickets", "--dir", dir); err == nil || !strings.Contains(err.Error(), "lower-case letters and digits") {
		t.Errorf("bad name: %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("a refused name wrote %s", dir)
	}

	// A non-empty directory is never written into.
	full := t.TempDir()
	if err := os.WriteFile(filepath.Join(full, "go.mod"), []byte("module mine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := runNew(t, "tickets", "--dir", full); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("non-empty dir: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(full, "go.mod")); string(b) != "module mine\n" {
		t.Errorf("go.mod overwritten: %q", b)
	}

	// An unknown template is refused before anything is written.
	if _, err := runNew(t, "tickets", "--dir", dir, "--template", "fancy"); err == nil || !strings.Contains(err.Error(), "want minimal or rich") {
		t.Errorf("unknown template: %v", err)
	}

	// The scaffold itself (generation is TestNewToolkitWithOnlyGo's).
	dir = filepath.Join(t.TempDir(), "tickets")
	out, err := runNew(t, "tickets", "--dir", dir, "--module", "github.com/acme/tickets", "--toolfleet-dir", "../..", "--no-generate")
	if err != nil {
		t.Fatalf("new toolkit: %v\n%s", err, out)
	}
	mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	abs, _ := filepath.Abs("../..")
	for _, want := range []string{"module github.com/acme/tickets", "=> " + abs, "\tgithub.com/bufbuild/buf/cmd/buf\n"} {
		if !strings.Contains(string(mod), want) {
			t.Errorf("go.mod lacks %q:\n%s", want, mod)
		}
	}
	for _, want := range []string{"go generate", "go test ./...", "toolfleet add tool", "Tickets.Hello"} {
		if !strings.Contains(out, want) {
			t.Errorf("next steps lack %q:\n%s", want, out)
		}
	}
}

// Run inside a toolfleet checkout (as the tutorial does), new finds it for
// go.mod's replace directive.
func TestFindCheckout(t *testing.T) {
	t.Parallel()
	abs, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if got := findCheckout(filepath.Join(abs, "weather")); got != abs {
		t.Errorf("findCheckout inside the checkout = %q, want %q", got, abs)
	}
	// A sibling folder named toolfleet next to the target counts too.
	parent := t.TempDir()
	if err := os.Symlink(abs, filepath.Join(parent, "toolfleet")); err != nil {
		t.Fatal(err)
	}
	if got := findCheckout(filepath.Join(parent, "weather")); got != filepath.Join(parent, "toolfleet") && got != abs {
		t.Errorf("findCheckout next to a checkout = %q", got)
	}
	if isCheckout(t.TempDir()) {
		t.Error("an empty folder is a checkout")
	}
}
