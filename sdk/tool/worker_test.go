package tool_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	schematestv1 "github.com/toolfleet/toolfleet/gen/tools/schematest/v1"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/sdk/tool/tooltest"
)

// testService implements the schematest toolkit for worker tests.
type testService struct {
	schematestv1.UnimplementedSchemaTestServiceServer
}

func (testService) Panic(ctx context.Context, req *schematestv1.PanicRequest) (*schematestv1.PanicResponse, error) {
	if req.GetPanic() {
		panic("boom")
	}
	return &schematestv1.PanicResponse{CallId: tool.CallID(ctx), TraceParent: tool.TraceParent(ctx)}, nil
}

func (testService) Sleep(ctx context.Context, req *schematestv1.SleepRequest) (*schematestv1.SleepResponse, error) {
	t := time.NewTimer(req.GetDuration().AsDuration())
	defer t.Stop()
	select {
	case <-t.C:
		return &schematestv1.SleepResponse{Slept: true}, nil
	case <-ctx.Done():
		return nil, ctx.Err() // a bare context error: the worker maps it to a code
	}
}

func (testService) Constraints(context.Context, *schematestv1.ConstraintsRequest) (*schematestv1.ConstraintsResponse, error) {
	return &schematestv1.ConstraintsResponse{Ok: true}, nil
}

func (testService) Types(ctx context.Context, req *schematestv1.TypesRequest) (*schematestv1.TypesResponse, error) {
	switch req.GetS() {
	case "fail":
		return nil, tool.NewError("cannot do that", tool.WithDeveloperMessage("dev detail"),
			tool.WithRetry(1500*time.Millisecond), tool.WithPromptHint("try another s"))
	case "plain":
		return nil, errors.New("disk on fire")
	case "status":
		return nil, status.Error(codes.NotFound, "no such thing")
	case "hang": // ignores everything but its context
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return &schematestv1.TypesResponse{Echo: req}, nil
}

type recorded struct {
	info    tool.CallInfo
	err     error
	traceID string // of the OpenTelemetry span context the call ran in
}

// startWorker serves the test toolkit on loopback until the test ends and returns
// a client connection, the worker and the calls seen by the metrics hook.
func startWorker(t *testing.T, cfg tool.Config) (*grpc.ClientConn, *tool.Worker, func() []recorded) {
	t.Helper()
	var mu sync.Mutex
	var calls []recorded
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.Metrics = func(ctx context.Context, info tool.CallInfo, _ time.Duration, err error) {
		mu.Lock()
		defer mu.Unlock()
		var tid string
		if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
			tid = sc.TraceID().String()
		}
		calls = append(calls, recorded{info, err, tid})
	}
	w, _ := tooltest.Start(t, cfg, func(w *tool.Worker) {
		schematestv1.RegisterSchemaTestServiceServer(w, testService{})
	})
	return tooltest.Dial(t, w.Addr()), w, func() []recorded {
		mu.Lock()
		defer mu.Unlock()
		return append([]recorded(nil), calls...)
	}
}

func callCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestWorkerServesHealth(t *testing.T) {
	t.Parallel()
	conn, _, _ := startWorker(t, tool.Config{})
	for _, svc := range []string{"", "tools.schematest.v1.SchemaTestService"} {
		resp, err := healthpb.NewHealthClient(conn).Check(callCtx(t), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil {
			t.Fatalf("health %q: %v", svc, err)
		}
		if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health %q = %v", svc, resp.GetStatus())
		}
	}
}

func TestWorkerPanicIsExecutionErrorAndWorkerLivesOn(t *testing.T) {
	t.Parallel()
	conn, _, calls := startWorker(t, tool.Config{})
	c := schematestv1.NewSchemaTestServiceClient(conn)

	_, err := c.Panic(callCtx(t), &schematestv1.PanicRequest{Panic: true})
	te, ok := tool.AsToolError(err)
	if !ok {
		t.Fatalf("panic: want an execution error, got %v", err)
	}
	if te.GetMessage() == "" || te.GetDeveloperMessage() != "panic: boom" {
		t.Fatalf("panic error = %+v", te)
	}
	if _, err := c.Panic(callCtx(t), &schematestv1.PanicRequest{}); err != nil {
		t.Fatalf("call after panic: %v", err)
	}
	got := calls()
	if len(got) != 2 || got[0].err == nil || got[1].err != nil ||
		got[0].info.FullMethod != "/tools.schematest.v1.SchemaTestService/Panic" {
		t.Fatalf("metrics hook saw %+v", got)
	}
}

func TestWorkerErrors(t *testing.T) {
	t.Parallel()
	conn, _, _ := startWorker(t, tool.Config{})
	c := schematestv1.NewSchemaTestServiceClient(conn)
	tests := []struct {
		s        string
		code     codes.Code
		wantTool bool
		want     string // ToolError message or status message
		wantDev  string
	}{
		{s: "fail", code: tool.ExecutionErrorCode, wantTool: true, want: "cannot do that", wantDev: "dev detail"},
		{s: "plain", code: tool.ExecutionErrorCode, wantTool: true, want: "the tool failed with an internal error", wantDev: "disk on fire"},
		{s: "status", code: codes.NotFound, want: "no such thing"},
	}
	for _, tt := range tests {
		t.Run(tt.s, func(t *testing.T) {
			t.Parallel()
			_, err := c.Types(callCtx(t), &schematestv1.TypesRequest{S: tt.s})
			if status.Code(err) != tt.code {
				t.Fatalf("code = %v, want %v (%v)", status.Code(err), tt.code, err)
			}
			te, ok := tool.AsToolError(err)
			if ok != tt.wantTool {
				t.Fatalf("AsToolError ok = %v, want %v", ok, tt.wantTool)
			}
			if !ok {
				if status.Convert(err).Message() != tt.want {
					t.Fatalf("message = %q", status.Convert(err).Message())
				}
				return
			}
			if te.GetMessage() != tt.want || te.GetDeveloperMessage() != tt.wantDev {
				t.Fatalf("tool error = %+v", te)
			}
			if tt.s == "fail" && (!te.GetCanRetry() || te.GetRetryAfterMs() != 1500 || te.GetAdditionalPromptContent() != "try another s") {
				t.Fatalf("retry/prompt not carried: %+v", te)
			}
		})
	}
}

func TestWorkerRejectsInvalidInputBeforeTheTool(t *testing.T) {
	t.Parallel()
	conn, _, _ := startWorker(t, tool.Config{})
	c := schematestv1.NewSchemaTestServiceClient(conn)
	req := validConstraints()
	req.Name = "x"
	req.Items = []*schematestv1.Item{{Name: "ok", Quantity: 1}, {Name: "", Quantity: 1}}
	if _, err := c.Constraints(callCtx(t), validConstraints()); err != nil {
		t.Fatalf("valid input rejected: %v", err)
	}
	_, err := c.Constraints(callCtx(t), req)
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("code = %v (%v)", status.Code(err), err)
	}
	ve, ok := tool.AsValidationError(err)
	if !ok {
		t.Fatalf("no ValidationError detail in %v", err)
	}
	want := map[string]string{
		"name":          "must be at least 2 characters",
		"items[1].name": "must be at least 1 character",
	}
	if len(ve.GetParameterErrors()) != len(want) {
		t.Fatalf("parameter_errors = %v, want %v", ve.GetParameterErrors(), want)
	}
	for k, v := range want {
		if ve.GetParameterErrors()[k] != v {
			t.Fatalf("parameter_errors[%q] = %q, want %q (all: %v)", k, ve.GetParameterErrors()[k], v, ve.GetParameterErrors())
		}
	}
}

func TestWorkerHonoursDeadline(t *testing.T) {
	t.Parallel()
	conn, _, calls := startWorker(t, tool.Config{})
	c := schematestv1.NewSchemaTestServiceClient(conn)
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	_, err := c.Sleep(ctx, &schematestv1.SleepRequest{Duration: durationpb.New(time.Hour)})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("code = %v, want DeadlineExceeded (%v)", status.Code(err), err)
	}
	// The worker side returns too, with a context code, never Unknown: DeadlineExceeded,
	// or Canceled when the client's cancellation arrives before the server's timer fires.
	deadline := time.Now().Add(10 * time.Second)
	for len(calls()) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	got := calls()
	if len(got) != 1 || (status.Code(got[0].err) != codes.DeadlineExceeded && status.Code(got[0].err) != codes.Canceled) {
		t.Fatalf("worker saw %+v", got)
	}
}

func TestWorkerReceivesCallMetadata(t *testing.T) {
	t.Parallel()
	conn, _, calls := startWorker(t, tool.Config{})
	c := schematestv1.NewSchemaTestServiceClient(conn)
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ctx := tool.OutgoingCallContext(callCtx(t), "call-123", tp)
	resp, err := c.Panic(ctx, &schematestv1.PanicRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetCallId() != "call-123" || resp.GetTraceParent() != tp {
		t.Fatalf("tool saw call_id=%q traceparent=%q", resp.GetCallId(), resp.GetTraceParent())
	}
	got := calls()
	if len(got) != 1 || got[0].info.CallID != "call-123" || got[0].info.TraceParent != tp {
		t.Fatalf("metrics hook saw %+v", got)
	}
	// The caller's trace is the parent of the call's OpenTelemetry context.
	if got[0].traceID != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Fatalf("span context trace id = %q", got[0].traceID)
	}
}

func TestTraceID(t *testing.T) {
	t.Parallel()
	tests := []struct{ tp, want string }{
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "4bf92f3577b34da6a3ce929d0e0e4736"},
		{"00-00000000000000000000000000000000-00f067aa0ba902b7-01", ""},
		{"garbage", ""},
		{"", ""},
	}
	for _, tt := range tests {
		ctx := metadata.NewIncomingContext(t.Context(), metadata.Pairs(tool.TraceParentKey, tt.tp))
		if got := tool.TraceID(ctx); got != tt.want {
			t.Errorf("TraceID(%q) = %q, want %q", tt.tp, got, tt.want)
		}
	}
}

func TestWorkerRunErrors(t *testing.T) {
	t.Parallel()
	w, err := tool.NewWorker(tool.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Run(t.Context()); !errors.Is(err, tool.ErrNoServices) {
		t.Fatalf("Run without services = %v, want ErrNoServices", err)
	}
	if err := w.Run(t.Context()); !errors.Is(err, tool.ErrAlreadyRunning) {
		t.Fatalf("second Run = %v, want ErrAlreadyRunning", err)
	}
}

func TestWorkerToolkits(t *testing.T) {
	t.Parallel()
	_, w, _ := startWorker(t, tool.Config{})
	tks := w.Toolkits()
	if len(tks) != 1 || tks[0].Name != "SchemaTest" || tks[0].Version != "0.3.1" ||
		tks[0].Service != "tools.schematest.v1.SchemaTestService" {
		t.Fatalf("toolkits = %+v", tks)
	}
}

// validConstraints returns a ConstraintsRequest that passes every rule.
func validConstraints() *schematestv1.ConstraintsRequest {
	return &schematestv1.ConstraintsRequest{
		Name:  "ok",
		Code:  "ABC",
		Op:    "add",
		Email: "a@example.com",
		Link:  "https://example.com/x",
		Id:    "123e4567-e89b-12d3-a456-426614174000",
		Count: 1,
		Ratio: 0.5,
		Fixed: "v1",
		Tags:  []string{"a"},
		Color: schematestv1.Color_COLOR_RED,
		Inner: &schematestv1.Inner{},
	}
}

// TestWorkerEnforcesContractPolicy: Types declares timeout 3s and
// max_result_bytes 4096 in its contract.
func TestWorkerEnforcesContractPolicy(t *testing.T) {
	t.Parallel()
	conn, _, _ := startWorker(t, tool.Config{})
	c := schematestv1.NewSchemaTestServiceClient(conn)

	_, err := c.Types(callCtx(t), &schematestv1.TypesRequest{S: strings.Repeat("x", 5000)})
	te, ok := tool.AsToolError(err)
	if !ok || !strings.Contains(te.GetMessage(), "this tool's limit is 4096") {
		t.Fatalf("big result = %v", err)
	}
	if _, err := c.Types(callCtx(t), &schematestv1.TypesRequest{S: strings.Repeat("x", 100)}); err != nil {
		t.Fatalf("small result: %v", err)
	}
	// The caller allows 10s; the contract's 3s applies.
	_, err = c.Types(callCtx(t), &schematestv1.TypesRequest{S: "hang"})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("hanging tool = %v, want DeadlineExceeded from the contract timeout", err)
	}
}

func TestWorkerOnStopRunsAfterServingInReverseOrder(t *testing.T) {
	t.Parallel()
	w, err := tool.NewWorker(tool.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), NATSURL: ""})
	if err != nil {
		t.Fatal(err)
	}
	if w.NATSURL() != "" {
		t.Fatalf("NATSURL = %q, want empty", w.NATSURL())
	}
	schematestv1.RegisterSchemaTestServiceServer(w, testService{})
	var order []string
	w.OnStop(func() { order = append(order, "first") })
	w.OnStop(func() { order = append(order, "second") })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	select {
	case <-w.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("worker not ready")
	}
	if len(order) != 0 {
		t.Fatalf("hooks ran while serving: %v", order)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("worker did not stop")
	}
	if strings.Join(order, ",") != "second,first" {
		t.Fatalf("hooks ran as %v, want second,first", order)
	}
}
