package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDevHydraLoginLoopbackOnly: the development login app checks no
// password, so it refuses to listen anywhere but loopback.
func TestDevHydraLoginLoopbackOnly(t *testing.T) {
	run := func(args ...string) error {
		root := newRootCommand()
		root.SetOut(io.Discard)
		root.SetErr(io.Discard)
		root.SetArgs(append([]string{"dev", "hydra-login"}, args...))
		return root.ExecuteContext(t.Context())
	}
	for _, addr := range []string{"0.0.0.0:3000", ":3000", "10.1.2.3:3000"} {
		if err := run("--listen", addr); err == nil || !strings.Contains(err.Error(), "only on loopback") {
			t.Errorf("--listen %s: %v", addr, err)
		}
	}
	if err := run("--listen", "127.0.0.1:0", "--hydra-admin", "4445"); err == nil || !strings.Contains(err.Error(), "--hydra-admin") {
		t.Errorf("--hydra-admin 4445: %v", err)
	}
}

// TestDevHydraLoginClientsFile: a clients file that cannot be registered
// stops hydra-login before it serves, naming the flag (registration itself
// runs on a real Hydra in e2e/oauth/devlogin).
func TestDevHydraLoginClientsFile(t *testing.T) {
	dir := t.TempDir()
	noID := filepath.Join(dir, "noid.json")
	notList := filepath.Join(dir, "object.json")
	for path, body := range map[string]string{noID: `[{"client_secret": "s"}]`, notList: `{"client_id": "a"}`} {
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for path, want := range map[string]string{
		filepath.Join(dir, "missing.json"): "no such file",
		noID:                               "has no client_id",
		notList:                            "want a JSON array",
	} {
		root := newRootCommand()
		root.SetOut(io.Discard)
		root.SetErr(io.Discard)
		root.SetArgs([]string{"dev", "hydra-login", "--listen", "127.0.0.1:0", "--hydra-admin", "http://127.0.0.1:1", "--clients", path})
		err := root.ExecuteContext(t.Context())
		if err == nil || !strings.Contains(err.Error(), "--clients") || !strings.Contains(err.Error(), want) {
			t.Errorf("--clients %s: %v, want an error naming --clients and %q", filepath.Base(path), err, want)
		}
	}
}
