// Package devstacktest gives an integration test its own dev stack: embedded NATS with
// JetStream and an embedded, latency-tuned Temporal server on in-memory SQLite, on free
// loopback ports, stopped when the test ends.
package devstacktest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/toolfleet/toolfleet/internal/devstack"
	"github.com/toolfleet/toolfleet/internal/natsx/natstest"
)

// Start runs a temporary stack for t. Pass a Config to change defaults; its DataDir,
// when empty, stays empty (everything temporary).
func Start(t testing.TB, cfgs ...devstack.Config) *devstack.Stack {
	t.Helper()
	var cfg devstack.Config
	if len(cfgs) > 0 {
		cfg = cfgs[0]
	}
	// A fixed JetStream ceiling, not 75% of the free disk (natstest.MaxStore).
	configure := cfg.NATSConfigure
	cfg.NATSConfigure = func(o *server.Options) {
		if configure != nil {
			configure(o)
		}
		natstest.RoomyStore(o)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	s, err := devstack.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("start dev stack: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

// Client dials the stack's Temporal frontend in its namespace and closes the client
// when the test ends.
func Client(t testing.TB, s *devstack.Stack) client.Client {
	t.Helper()
	c, err := client.Dial(client.Options{
		HostPort:  s.Temporal.Address(),
		Namespace: s.Namespace(),
		Logger:    quietLogger{},
	})
	if err != nil {
		t.Fatalf("dial temporal: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// quietLogger drops the SDK's info chatter; tests report what matters themselves.
type quietLogger struct{}

func (quietLogger) Debug(string, ...any) {}
func (quietLogger) Info(string, ...any)  {}
func (quietLogger) Warn(string, ...any)  {}
func (quietLogger) Error(string, ...any) {}

// OneActivity is the shortest real Temporal round trip: a workflow that runs the
// Upper activity once. Tests and benchmarks that measure the stack use it.
func OneActivity(ctx workflow.Context, s string) (string, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 10 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 1},
	})
	var out string
	err := workflow.ExecuteActivity(ctx, Upper, s).Get(ctx, &out)
	return out, err
}

// Upper is OneActivity's activity.
func Upper(_ context.Context, s string) (string, error) { return strings.ToUpper(s), nil }

// StartWorker runs a Temporal worker for queue with OneActivity, Upper and the
// given extra workflows registered, and stops it when the test ends.
func StartWorker(t testing.TB, c client.Client, queue string, workflows ...any) {
	t.Helper()
	w := worker.New(c, queue, worker.Options{})
	w.RegisterWorkflow(OneActivity)
	w.RegisterActivity(Upper)
	for _, wf := range workflows {
		w.RegisterWorkflow(wf)
	}
	if err := w.Start(); err != nil {
		t.Fatalf("start temporal worker: %v", err)
	}
	t.Cleanup(w.Stop)
}
