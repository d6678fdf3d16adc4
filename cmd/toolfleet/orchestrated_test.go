package main

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/toolfleet/toolfleet/internal/devstack"
	"github.com/toolfleet/toolfleet/orchestrator/agent"
	"github.com/toolfleet/toolfleet/orchestrator/metrics"
	"github.com/toolfleet/toolfleet/orchestrator/runner"
	"github.com/toolfleet/toolfleet/services/gateway"
)

// startOrchestrated starts what `toolfleet dev` starts on stack: the gateway
// with mounts and the bundled workers, then an orchestrator using models (nil:
// the built-in ones). The caller serves its mounts with the returned
// orchestrator; both stop at the end of the test.
func startOrchestrated(ctx context.Context, t *testing.T, stack *devstack.Stack, models agent.Models, mounts ...gateway.Mount) (*fleet, *runner.Orchestrator) {
	t.Helper()
	return startWith(ctx, t, stack, models, false, nil, mounts...)
}

// startTraced is startOrchestrated with the gateway's and the orchestrator's
// tracing set (the global TracerProvider records it).
func startTraced(ctx context.Context, t *testing.T, stack *devstack.Stack, models agent.Models, tracing bool, mounts ...gateway.Mount) (*fleet, *runner.Orchestrator) {
	t.Helper()
	return startWith(ctx, t, stack, models, tracing, nil, mounts...)
}

// startWith is startOrchestrated with tracing and the orchestrator's metrics
// (nil: its own) set.
func startWith(ctx context.Context, t *testing.T, stack *devstack.Stack, models agent.Models, tracing bool, m *metrics.Metrics, mounts ...gateway.Mount) (*fleet, *runner.Orchestrator) {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	f, err := startFleet(ctx, fleetConfig{Host: "127.0.0.1", NATSURL: stack.NATS.URL(), Logger: logger, Mounts: mounts, Tracing: tracing})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.stop() })
	if err := f.waitToolkits(ctx, f.Toolkits...); err != nil {
		t.Fatal(err)
	}
	o, err := runner.Start(ctx, runner.Config{TemporalAddress: stack.Temporal.Address(), Namespace: stack.Namespace(),
		NATSURL: stack.NATS.URL(), GatewayAddress: f.Gateway.Addr(), Models: models, MemoryStorage: true, Logger: logger,
		Tracing: tracing, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(o.Stop)
	return f, o
}
