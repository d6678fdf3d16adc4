package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoEmbeddedServers keeps the production binary free of the embedded
// NATS and Temporal servers that only `toolfleet dev` links.
func TestNoEmbeddedServers(t *testing.T) {
	t.Parallel()
	out, err := exec.CommandContext(t.Context(), "go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 50 {
		t.Fatalf("go list -deps found only %d packages", len(deps))
	}
	for _, d := range deps {
		for _, bad := range []string{"github.com/nats-io/nats-server", "go.temporal.io/server", "github.com/toolfleet/toolfleet/internal/devstack"} {
			if strings.HasPrefix(d, bad) {
				t.Errorf("cmd/orchestrator links %s", d)
			}
		}
	}
}

func TestFlagsValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"bad log level", []string{"--log-level", "loud"}, "--log-level"},
		{"no temporal", []string{"--temporal-address", ""}, "Temporal address is required"},
		{"unknown flag", []string{"--nope"}, "unknown flag"},
		{"missing trigger file", []string{"--triggers", "/nonexistent/triggers.yaml"}, "trigger:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := run(t.Context(), tt.args)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("run(%v) = %v, want an error containing %q", tt.args, err, tt.want)
			}
		})
	}
}
