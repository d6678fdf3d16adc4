package main

import (
	"io"
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
