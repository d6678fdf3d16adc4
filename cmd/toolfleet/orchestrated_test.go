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
	return startConfigured(ctx, t, stack, models, func(c *runner.Config) { c.Tracing, c.Metrics = tracing, m }, mounts...)
}

// startConfigured is startOrchestrated with the orchestrator's configuration
// changed by configure.
func startConfigured(ctx context.Context, t *testing.T, stack *devstack.Stack, models agent.Models, configure func(*runner.Config), mounts ...gateway.Mount) (*fleet, *runner.Orchestrator) {
	t.Helper()
	var rc runner.Config
	configure(&rc)
	tracing := rc.Tracing
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	f, err := startFleet(ctx, fleetConfig{Host: "127.0.0.1", NATSURL: stack.NATS.URL(), Logger: logger, Mounts: mounts, Tracing: tracing})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.stop() })
	if err := f.waitToolkits(ctx, f.Toolkits...); err != nil {
		t.Fatal(err)
	}
	rc.TemporalAddress, rc.Namespace, rc.NATSURL, rc.GatewayAddress = stack.Temporal.Address(), stack.Namespace(), stack.NATS.URL(), f.Gateway.Addr()
	rc.Models, rc.MemoryStorage, rc.Logger = models, true, logger
	o, err := runner.Start(ctx, rc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(o.Stop)
	return f, o
}
