// Package programstack starts what the program tests of several packages
// share (orchestrator/program, orchestrator/programapi): embedded NATS and
// Temporal, a real gateway with the calculator and SchemaTest workers (package
// e2e), the run store, and a Temporal worker running programs and runs — and
// serves the ProgramService over Connect on it. Tests only: it sits beside e2e,
// where the layering rule lets it import the orchestrator and the gateway.
package programstack

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	tclient "go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"

	"github.com/toolfleet/toolfleet/e2e"
	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/gen/toolfleet/v1/toolfleetv1connect"
	"github.com/toolfleet/toolfleet/internal/devstack/devstacktest"
	"github.com/toolfleet/toolfleet/orchestrator/agent"
	"github.com/toolfleet/toolfleet/orchestrator/program"
	"github.com/toolfleet/toolfleet/orchestrator/programapi"
	"github.com/toolfleet/toolfleet/orchestrator/runstore"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall/apibase"
	"github.com/toolfleet/toolfleet/sdk/client"
)

// Stack is a running stack; everything stops when the test ends.
type Stack struct {
	Temporal tclient.Client
	Fleet    *e2e.Fleet
	JS       jetstream.JetStream
	// Queue is the task queue of the stack's worker (named after the test).
	Queue string
	// Runs starts agent runs on the same worker, which runs code-mode
	// programs as child workflows.
	Runs   *agent.Runs
	Models *agent.Resolver
	// Store holds the program values kept out of history (Config).
	Store  *runstore.Store
	Config program.Config
	// Namespace is Temporal's.
	Namespace string
}

// Start starts a stack whose fleet takes opts (its NATS is the stack's) and
// whose Temporal client keeps program values in the blob store as the
// orchestrator does (program.ExternalStorage, configured by cfg).
func Start(t *testing.T, opts e2e.Options, cfg program.Config) *Stack {
	t.Helper()
	s := devstacktest.Start(t)
	opts.NATSURL = s.NATS.URL()
	fleet := e2e.Start(t, opts)
	nc, err := nats.Connect(s.NATS.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	events, err := agent.OpenEvents(t.Context(), nc, js, agent.EventStreamConfig("", true))
	if err != nil {
		t.Fatal(err)
	}
	gw, err := client.New(fleet.Addr, client.WithRetry(client.RetryPolicy{MaxAttempts: 1}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gw.Close() })

	// Room for the tests that move more than Temporal's 50 MB of history.
	store, err := runstore.OpenStore(t.Context(), js, runstore.StoreConfig{Memory: true, MaxBlobBytes: 512 << 20})
	if err != nil {
		t.Fatal(err)
	}
	c, err := tclient.Dial(tclient.Options{HostPort: s.Temporal.Address(), Namespace: s.Namespace(),
		Logger: tlog.NewStructuredLogger(slog.New(slog.DiscardHandler)), ExternalStorage: program.ExternalStorage(store, cfg)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	queue := "program-" + strings.ReplaceAll(t.Name(), "/", "-")
	w := worker.New(c, queue, worker.Options{DeadlockDetectionTimeout: program.DeadlockDetectionTimeout})
	program.Register(w, &program.Activities{Gateway: gw, Events: events})
	models := agent.NewResolver()
	agent.Register(w, &agent.Activities{Store: store, Events: events, Gateway: gw, Models: models})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return &Stack{Temporal: c, Fleet: fleet, JS: js, Queue: queue, Models: models, Store: store, Config: cfg,
		Namespace: s.Namespace(), Runs: &agent.Runs{Temporal: c, Store: store, TaskQueue: queue}}
}

// Serve runs the ProgramService on s over real Connect on loopback. The
// caller's subject is the bearer token, standing in for the gateway's
// authentication; "reader" holds only programs:read, every other subject
// every program scope.
func Serve(t *testing.T, s *Stack) (toolfleetv1connect.ProgramServiceClient, *programapi.Service) {
	t.Helper()
	svc := &programapi.Service{
		Programs: &program.Programs{Temporal: s.Temporal, TaskQueue: s.Queue, Config: s.Config},
		Events:   s.JS,
		Triggers: func() []*toolfleetv1.Trigger {
			return []*toolfleetv1.Trigger{{Name: "orders", Subject: "toolfleet.triggers.orders", Target: "program"}}
		},
		Auth: func(_ context.Context, h http.Header) (apibase.Caller, error) {
			sub := strings.TrimPrefix(h.Get("Authorization"), "Bearer ")
			switch sub {
			case "":
				return apibase.Caller{}, errors.New("no subject")
			case "reader":
				return apibase.Caller{Subject: sub, Scopes: []string{programapi.ScopeRead}}, nil
			}
			return apibase.Caller{Subject: sub, Scopes: []string{programapi.ScopeRun, programapi.ScopeRead, programapi.ScopeApprove, "tools:call", "schematest:read"}}, nil
		},
	}
	mux := http.NewServeMux()
	mux.Handle(svc.Handler())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return toolfleetv1connect.NewProgramServiceClient(srv.Client(), srv.URL), svc
}

// As is a request of msg by subject, as Serve's callers authenticate.
func As[T any](subject string, msg *T) *connect.Request[T] {
	req := connect.NewRequest(msg)
	req.Header().Set("Authorization", "Bearer "+subject)
	return req
}
