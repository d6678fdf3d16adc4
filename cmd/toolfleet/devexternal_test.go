package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/internal/devstack/devstacktest"
	"github.com/toolfleet/toolfleet/orchestrator/runner"
)

// TestDevWithoutOrchestrator: `toolfleet dev --no-orchestrator` starts the
// gateway and workers but no orchestrator; runs are refused until one started
// separately (here in the test process, as cmd/orchestrator would run it)
// polls the stack, then the dev gateway serves them and they complete.
func TestDevWithoutOrchestrator(t *testing.T) {
	t.Parallel()
	stack := devstacktest.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := devConfig{Host: "127.0.0.1", NoOrchestrator: true}
	svc, err := startDevServices(ctx, stack, cfg, devServiceOptions{Logger: logger, MemoryStorage: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.stop() })
	if svc.orch != nil {
		t.Fatal("--no-orchestrator started an orchestrator")
	}
	gw := svc.fleet.Gateway.Addr()
	if cmd := externalOrchestratorCommand(stack, cfg, gw); !strings.Contains(cmd, "--gateway-address "+gw) || !strings.Contains(cmd, "--temporal-address "+stack.Temporal.Address()) {
		t.Errorf("the banner's orchestrator command lacks the addresses: %s", cmd)
	}
	run := func() (string, error) {
		var out bytes.Buffer
		root := newRootCommand()
		root.SetArgs([]string{"agent", "run", "--gateway", gw, "--model", "scripted:demo", "add 2 and 3", "--watch"})
		root.SetOut(&out)
		root.SetErr(&out)
		err := root.ExecuteContext(ctx)
		return out.String(), err
	}
	if out, err := run(); err == nil {
		t.Fatalf("a run was served with no orchestrator anywhere:\n%s", out)
	}

	o, err := runner.Start(ctx, runner.Config{TemporalAddress: stack.Temporal.Address(), Namespace: stack.Namespace(),
		NATSURL: stack.NATS.URL(), GatewayAddress: gw, MemoryStorage: true, Logger: logger, PrincipalMaxBytes: -1, PrincipalMaxRuns: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(o.Stop)
	// The dev gateway binds the orchestrator's buckets within half a second
	// of their making; retried until then (bounded by ctx).
	for {
		out, err := run()
		if err == nil {
			if !strings.Contains(out, "✓") {
				t.Errorf("the run's output lacks its answer:\n%s", out)
			}
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("no run was served with an external orchestrator: %v\n%s", err, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
