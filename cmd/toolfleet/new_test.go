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

	// The scaffold, with gen/ from the project's buf (make tools builds it).
	dir = filepath.Join(t.TempDir(), "tickets")
	buf, err := filepath.Abs("../../build/bin/buf")
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"tickets", "--dir", dir, "--module", "github.com/acme/tickets", "--toolfleet-dir", "../.."}
	_, statErr := os.Stat(buf)
	if statErr == nil {
		args = append(args, "--buf", buf)
	} else {
		args = append(args, "--no-generate")
	}
	out, err := runNew(t, args...)
	if err != nil {
		t.Fatalf("new toolkit: %v\n%s", err, out)
	}
	mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	abs, _ := filepath.Abs("../..")
	if !strings.Contains(string(mod), "module github.com/acme/tickets") || !strings.Contains(string(mod), "=> "+abs) {
		t.Errorf("go.mod:\n%s", mod)
	}
	if statErr == nil {
		if _, err := os.Stat(filepath.Join(dir, "gen/tickets/v1/tickets_grpc.pb.go")); err != nil || !strings.Contains(out, "generated") {
			t.Errorf("--buf did not generate gen/: %v\n%s", err, out)
		}
	} else {
		t.Logf("build/bin/buf missing (make tools): generation not checked")
	}
	if !strings.Contains(out, "go test ./...") {
		t.Errorf("no next steps:\n%s", out)
	}
}
