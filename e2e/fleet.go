// Package e2e holds the end-to-end tests of the fleet and the runnable
// examples of sdk/client, and starts a real gateway with real tool workers on
// loopback for the tests of the surfaces built around it: the Go client
// (sdk/client), the MCP endpoint and the CLI. It sits at the top of the module,
// where the layering rule (docs/architecture.md) lets it import everything
// (sdk/ packages, their tests included, may not import the gateway); no
// production package imports it. Nothing is mocked: the workers are sdk/tool
// workers serving the bundled calculator and the test-only SchemaTest toolkit,
// with side-effect counters the tests read.
package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	calculatorv1 "github.com/toolfleet/toolfleet/gen/tools/calculator/v1"
	schematestv1 "github.com/toolfleet/toolfleet/gen/tools/schematest/v1"
	"github.com/toolfleet/toolfleet/internal/natsx/natstest"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/services/gateway"
	"github.com/toolfleet/toolfleet/services/gateway/ratelimit"
	"github.com/toolfleet/toolfleet/workers/calculator/calculator"
)

// Secret is the HS256 secret of a fleet started with Options.Auth.
const Secret = "gatewaytest-secret-gatewaytest-secret"

// Options select what a fleet runs with.
type Options struct {
	// NATS starts an embedded NATS server (Start only): idempotency by call_id
	// and events on.
	NATS bool
	// NATSURL connects the gateway to a running NATS server instead.
	NATSURL string
	// Auth turns bearer auth on with HS256 and [Secret]; mint tokens with Fleet.Token.
	Auth bool
	// Logger receives the gateway's and workers' logs. Default: discarded.
	Logger *slog.Logger
	// ShutdownTimeout bounds the gateway's graceful stop. Default 5s.
	ShutdownTimeout time.Duration
	// Limits are the gateway's rate limits and quotas (every replica's).
	Limits ratelimit.Config
}

// Fleet is a running gateway with a calculator worker and a SchemaTest worker.
type Fleet struct {
	Gateway *gateway.Gateway
	// Addr is the gateway's host:port (gRPC, Connect, HTTP and /mcp).
	Addr string
	// Calculator counts its calls.
	Calculator *Calculator
	// SchemaTest counts its calls and fails on request.
	SchemaTest *SchemaTest
	// NATSURL is the NATS server of the fleet, if any.
	NATSURL string

	log   *slog.Logger
	cfg   gateway.Config
	stops []func() error
}

// Start runs a fleet until the test ends (see [New]).
func Start(t testing.TB, opts Options) *Fleet {
	t.Helper()
	if opts.NATS {
		opts.NATSURL = natstest.Start(t).URL()
	}
	f, err := New(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Close(); err != nil {
			t.Error(err)
		}
	})
	return f
}

// New runs a fleet and waits (up to 20s) until the gateway serves both toolkits
// and, with NATS, until its idempotency store works. Close stops it.
func New(ctx context.Context, opts Options) (_ *Fleet, err error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	f := &Fleet{Calculator: &Calculator{Service: calculator.New()}, SchemaTest: &SchemaTest{callIDs: map[string][]string{}, traces: map[string]string{}, slept: map[string]int{}},
		NATSURL: opts.NATSURL, log: log}
	defer func() {
		if err != nil {
			_ = f.Close()
		}
	}()
	calc, err := f.startWorker("", func(w *tool.Worker) { calculatorv1.RegisterCalculatorServiceServer(w, f.Calculator) })
	if err != nil {
		return nil, err
	}
	st, err := f.startWorker("", func(w *tool.Worker) { schematestv1.RegisterSchemaTestServiceServer(w, f.SchemaTest) })
	if err != nil {
		return nil, err
	}
	if opts.ShutdownTimeout <= 0 {
		opts.ShutdownTimeout = 5 * time.Second
	}
	cfg := gateway.Config{Listen: "127.0.0.1:0", Workers: []string{calc, st}, NATSURL: opts.NATSURL, Logger: log, ShutdownTimeout: opts.ShutdownTimeout,
		Limits: opts.Limits}
	if opts.Auth {
		cfg.Auth.HS256Secret = []byte(Secret)
	} else {
		cfg.Auth.Disabled = true
	}
	if cfg.WarmUp == 0 {
		cfg.WarmUp = 100 * time.Millisecond // local workers answer the probe at once
	}
	g, err := gateway.New(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("e2e: gateway.New: %w", err)
	}
	if err := f.run("gateway", g.Run, g.Ready()); err != nil {
		return nil, err
	}
	f.Gateway, f.Addr, f.cfg = g, g.Addr(), cfg
	for _, id := range []string{"Calculator.Add", "Calculator.Multiply", "SchemaTest.Types", "SchemaTest.Sleep"} {
		if err := f.waitTool(id); err != nil {
			return nil, err
		}
	}
	if opts.NATSURL != "" {
		if err := f.waitIdempotency(ctx); err != nil {
			return nil, err
		}
		if err := waitLimits(g); err != nil {
			return nil, err
		}
		// Ready, so its registry is warm: an unknown tool is NOT_FOUND from now on.
		if err := waitServing(g); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// Close stops the gateway, then the workers, each within 30s.
func (f *Fleet) Close() error {
	var errs []error
	for i := len(f.stops) - 1; i >= 0; i-- {
		errs = append(errs, f.stops[i]())
	}
	f.stops = nil
	return errors.Join(errs...)
}

// run starts a server's Run in a goroutine owned by the fleet and waits until ready.
func (f *Fleet) run(what string, run func(context.Context) error, ready <-chan struct{}) error {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	f.stops = append(f.stops, func() error {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				return fmt.Errorf("e2e: %s: %w", what, err)
			}
			return nil
		case <-time.After(30 * time.Second):
			return fmt.Errorf("e2e: %s did not stop", what)
		}
	})
	select {
	case <-ready:
		return nil
	case err := <-done:
		return fmt.Errorf("e2e: %s: %w", what, err)
	case <-time.After(10 * time.Second):
		return fmt.Errorf("e2e: %s not ready", what)
	}
}

// Replica starts another gateway with the fleet's configuration (the same
// workers, NATS and auth), as a second replica behind a load balancer would
// run, waits until it serves both toolkits, and returns its address. It stops
// with the fleet.
func (f *Fleet) Replica(t testing.TB) string {
	t.Helper()
	g, err := gateway.New(t.Context(), f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.run("gateway replica", g.Run, g.Ready()); err != nil {
		t.Fatal(err)
	}
	if f.cfg.NATSURL != "" {
		if err := waitLimits(g); err != nil {
			t.Fatal(err)
		}
		if err := waitServing(g); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, id := range []string{"Calculator.Add", "SchemaTest.Types"} {
		for {
			if _, err := g.GetTool(&toolfleetv1.GetToolRequest{ToolId: id}); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("e2e: the replica does not serve %s", id)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return g.Addr()
}

// AddWorker starts one more worker that joins the fleet through NATS
// announcements (the fleet needs Options.NATS) and stops it with the fleet.
func (f *Fleet) AddWorker(t testing.TB, register func(w *tool.Worker)) {
	t.Helper()
	if f.NATSURL == "" {
		t.Fatal("e2e: AddWorker needs a fleet with NATS")
	}
	if _, err := f.startWorker(f.NATSURL, register); err != nil {
		t.Fatal(err)
	}
}

// startWorker runs a worker on loopback (announcing on natsURL when set) and
// returns its address.
func (f *Fleet) startWorker(natsURL string, register func(w *tool.Worker)) (string, error) {
	w, err := tool.NewWorker(tool.Config{Name: "e2e", NATSURL: natsURL, Logger: f.log, ShutdownTimeout: 2 * time.Second,
		AnnounceInterval: 100 * time.Millisecond})
	if err != nil {
		return "", fmt.Errorf("e2e: NewWorker: %w", err)
	}
	register(w)
	if err := f.run("worker", w.Run, w.Ready()); err != nil {
		return "", err
	}
	return w.Addr(), nil
}

// WaitTool waits until the gateway serves toolID, failing the test after 20s.
func (f *Fleet) WaitTool(t testing.TB, toolID string) {
	t.Helper()
	if err := f.waitTool(toolID); err != nil {
		t.Fatal(err)
	}
}

func (f *Fleet) waitTool(toolID string) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := f.Gateway.GetTool(&toolfleetv1.GetToolRequest{ToolId: toolID}); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("e2e: the gateway does not serve %s", toolID)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitIdempotency waits until a successful call is stored: the same call_id
// called twice runs the tool once. It probes with Calculator.Multiply, whose
// calls the tests do not assert on.
func (f *Fleet) waitIdempotency(ctx context.Context) error {
	deadline := time.Now().Add(20 * time.Second)
	p := &gateway.Principal{Anonymous: true}
	for i := 0; ; i++ {
		req := &toolfleetv1.CallToolRequest{CallId: fmt.Sprintf("gatewaytest-idempotency-probe-%d", i), ToolId: "Calculator.Multiply",
			Input: &structpb.Struct{Fields: map[string]*structpb.Value{"a": structpb.NewNumberValue(1), "b": structpb.NewNumberValue(1)}}}
		before := f.Calculator.Multiplies.Load()
		_, err1 := f.Gateway.Call(ctx, p, req)
		_, err2 := f.Gateway.Call(ctx, p, req)
		if err1 == nil && err2 == nil && f.Calculator.Multiplies.Load()-before == 1 {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("e2e: the gateway's idempotency store did not come up")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitServing waits until a gateway with NATS is ready (its JetStream
// assets exist and its registry is warm), 20s at most.
func waitServing(g *gateway.Gateway) error {
	for deadline := time.Now().Add(20 * time.Second); !g.Serving(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			return errors.New("e2e: the gateway never became ready")
		}
	}
	return nil
}

// waitLimits waits until a gateway with rate limits shares their state
// through NATS (20s at most).
func waitLimits(g *gateway.Gateway) error {
	for deadline := time.Now().Add(20 * time.Second); !g.LimitsShared(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			return errors.New("e2e: the gateway's rate limits never reached NATS")
		}
	}
	return nil
}

// Token mints a bearer token for a fleet started with Options.Auth, valid for
// ten minutes.
func (f *Fleet) Token(t testing.TB, scopes ...string) string {
	t.Helper()
	return f.TokenFor(t, "gatewaytest", scopes...)
}

// TokenFor mints a token for the principal subject.
func (f *Fleet) TokenFor(t testing.TB, subject string, scopes ...string) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": subject,
		"scope": strings.Join(scopes, " "), "exp": time.Now().Add(10 * time.Minute).Unix()}).SignedString([]byte(Secret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Calculator is the bundled calculator with side-effect counters.
type Calculator struct {
	*calculator.Service
	// Adds and Multiplies count the calls that reached the tool.
	Adds, Multiplies atomic.Int64
}

// Add counts, then adds.
func (c *Calculator) Add(ctx context.Context, req *calculatorv1.AddRequest) (*calculatorv1.AddResponse, error) {
	c.Adds.Add(1)
	return c.Service.Add(ctx, req)
}

// Multiply counts, then multiplies.
func (c *Calculator) Multiply(ctx context.Context, req *calculatorv1.MultiplyRequest) (*calculatorv1.MultiplyResponse, error) {
	c.Multiplies.Add(1)
	return c.Service.Multiply(ctx, req)
}

// SchemaTest serves the SchemaTest toolkit. Types echoes its input, except for
// these values of s:
//
//   - "fail" or "fail:<key>": an execution error that may not be retried;
//   - "retry" or "retry:<key>": a retryable execution error (retry after
//     [RetryAfter]), every time;
//   - "flaky:<key>": a retryable execution error on the first call with that
//     s, an echo afterwards.
//
// Sleep sleeps for its duration or until the call is cancelled.
type SchemaTest struct {
	schematestv1.UnimplementedSchemaTestServiceServer
	// TypesCalls counts Types calls that reached the tool.
	TypesCalls atomic.Int64
	// Sleeps counts Sleep calls; Cancelled those that ended by cancellation.
	Sleeps, Cancelled atomic.Int64

	mu      sync.Mutex
	callIDs map[string][]string
	traces  map[string]string // the traceparent of the last Types call by s
	slept   map[string]int    // Sleep calls by call id
}

// RetryAfter is the delay the retryable failures of SchemaTest.Types suggest.
const RetryAfter = 20 * time.Millisecond

// TypesFor returns the call ids of the Types calls made with s, in order.
func (s *SchemaTest) TypesFor(v string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.callIDs[v])
}

// TraceParentFor returns the traceparent the last Types call made with s
// received ("" when none).
func (s *SchemaTest) TraceParentFor(v string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.traces[v]
}

// Types implements the SchemaTest.Types tool.
func (s *SchemaTest) Types(ctx context.Context, req *schematestv1.TypesRequest) (*schematestv1.TypesResponse, error) {
	s.TypesCalls.Add(1)
	s.mu.Lock()
	s.callIDs[req.GetS()] = append(s.callIDs[req.GetS()], tool.CallID(ctx))
	s.traces[req.GetS()] = tool.TraceParent(ctx)
	n := len(s.callIDs[req.GetS()])
	s.mu.Unlock()
	switch v := req.GetS(); {
	case v == "fail" || strings.HasPrefix(v, "fail:"):
		return nil, tool.NewError("cannot do that", tool.WithDeveloperMessage("asked to fail"))
	case v == "retry" || strings.HasPrefix(v, "retry:"):
		return nil, tool.NewError("busy, try again", tool.WithRetry(RetryAfter))
	case strings.HasPrefix(v, "flaky:") && n == 1:
		return nil, tool.NewError("busy, try again", tool.WithRetry(RetryAfter))
	}
	return &schematestv1.TypesResponse{Echo: req}, nil
}

// SleepsByCallID returns how many Sleep calls each call id made: Sleep is
// neither read-only nor idempotent, so it is the fleet's side-effect counter.
func (s *SchemaTest) SleepsByCallID() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.slept)
}

// Sleep implements the SchemaTest.Sleep tool.
func (s *SchemaTest) Sleep(ctx context.Context, req *schematestv1.SleepRequest) (*schematestv1.SleepResponse, error) {
	s.Sleeps.Add(1)
	s.mu.Lock()
	s.slept[tool.CallID(ctx)]++
	s.mu.Unlock()
	t := time.NewTimer(req.GetDuration().AsDuration())
	defer t.Stop()
	select {
	case <-t.C:
		return &schematestv1.SleepResponse{Slept: true}, nil
	case <-ctx.Done():
		s.Cancelled.Add(1)
		return nil, ctx.Err()
	}
}
