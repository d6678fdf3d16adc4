package e2e_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/toolfleet/toolfleet/e2e"
	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/client"
)

func newClient(t *testing.T, addr string, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// protocols run a test over gRPC and over Connect.
var protocols = []struct {
	name string
	opts []client.Option
}{
	{"grpc", nil},
	{"connect", []client.Option{client.WithConnect(nil)}},
}

// TestIdempotentRetries shows the contract between the client's retries and the
// gateway's idempotency store with a side-effect counter: a retryable failure is
// not stored, so the retry (same call_id) runs the tool again; a success is
// stored, so a repeat returns it without running the tool.
func TestIdempotentRetries(t *testing.T) {
	t.Parallel()
	fleet := e2e.Start(t, e2e.Options{NATS: true})
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			c := newClient(t, fleet.Addr, p.opts...)
			s := "flaky:" + p.name
			req := &toolfleetv1.CallToolRequest{CallId: "retry-" + p.name, ToolId: "SchemaTest.Types", Input: input(t, map[string]any{"s": s}), Approval: approval}

			res, err := c.CallTool(t.Context(), req)
			if err != nil {
				t.Fatalf("CallTool: %v", err)
			}
			if !res.Success || res.Attempts != 2 || res.CallID != req.CallId {
				t.Fatalf("first call: success=%v attempts=%d call_id=%q, want a success on attempt 2 with call_id %q", res.Success, res.Attempts, res.CallID, req.CallId)
			}
			if ids := fleet.SchemaTest.TypesFor(s); !slices.Equal(ids, []string{req.CallId, req.CallId}) {
				t.Fatalf("the tool ran with call ids %q, want the same call id twice (the retryable failure was not stored)", ids)
			}

			again, err := c.CallTool(t.Context(), req)
			if err != nil {
				t.Fatalf("repeat: %v", err)
			}
			if !again.Success || again.Attempts != 1 || again.Value.GetStructValue().GetFields()["echo"].GetStructValue().GetFields()["s"].GetStringValue() != s {
				t.Fatalf("repeat: %+v, want the stored success", again)
			}
			if n := len(fleet.SchemaTest.TypesFor(s)); n != 2 {
				t.Fatalf("the tool ran %d times after the repeat, want still 2: a stored success must not run again", n)
			}
		})
	}
}

func TestSuccessIsNotRunTwice(t *testing.T) {
	t.Parallel()
	fleet := e2e.Start(t, e2e.Options{NATS: true})
	c := newClient(t, fleet.Addr)
	req := &toolfleetv1.CallToolRequest{CallId: "add-once", ToolId: "Calculator.Add", Input: input(t, map[string]any{"a": 1, "b": 2})}
	for i := range 3 {
		res, err := c.CallTool(t.Context(), req)
		if err != nil || !res.Success {
			t.Fatalf("call %d: %v %+v", i, err, res)
		}
		var out struct{ Result float64 }
		if err := res.Decode(&out); err != nil || out.Result != 3 {
			t.Fatalf("call %d: result %v (%v), want 3", i, out.Result, err)
		}
	}
	if n := fleet.Calculator.Adds.Load(); n != 1 {
		t.Fatalf("Add ran %d times for one call_id, want 1", n)
	}
}

// approval approves SchemaTest.Types, whose contract requires one (auth is off,
// so the anonymous caller may approve).
var approval = &toolfleetv1.Approval{Approver: "tester"}

// TestRetryPolicy: the tool contract's retry policy (SchemaTest.Types: 3
// attempts) drives the client's retries, field by field over the client's own.
// Types is read-only, so the client sends no call_id: each attempt gets its own
// id from the gateway.
func TestRetryPolicy(t *testing.T) {
	t.Parallel()
	fleet := e2e.Start(t, e2e.Options{})
	tests := []struct {
		name         string
		s            string
		policy       client.RetryPolicy
		wantSuccess  bool
		wantAttempts int
	}{
		{"retryable failure until the contract's attempts run out", "retry:default", client.RetryPolicy{}, false, 3},
		{"the contract's attempts win over the client's", "retry:five", client.RetryPolicy{MaxAttempts: 5}, false, 3},
		{"retries off", "retry:off", client.RetryPolicy{MaxAttempts: 1}, false, 1},
		{"failure that may not be retried", "fail:policy", client.RetryPolicy{}, false, 1},
		{"flaky tool succeeds on retry", "flaky:policy", client.RetryPolicy{}, true, 2},
		{"success", "plain", client.RetryPolicy{}, true, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := newClient(t, fleet.Addr, client.WithRetry(tt.policy))
			res, err := c.CallTool(t.Context(), &toolfleetv1.CallToolRequest{ToolId: "SchemaTest.Types", Input: input(t, map[string]any{"s": tt.s}), Approval: approval})
			if err != nil {
				t.Fatalf("Call: %v", err)
			}
			if res.Success != tt.wantSuccess || res.Attempts != tt.wantAttempts {
				t.Fatalf("success=%v attempts=%d, want %v and %d", res.Success, res.Attempts, tt.wantSuccess, tt.wantAttempts)
			}
			ids := fleet.SchemaTest.TypesFor(tt.s)
			if len(ids) != tt.wantAttempts || ids[len(ids)-1] != res.CallID || len(slices.Compact(slices.Sorted(slices.Values(ids)))) != len(ids) {
				t.Fatalf("the tool ran with call ids %q, want %d runs with distinct generated ids, the last %q", ids, tt.wantAttempts, res.CallID)
			}
			if !tt.wantSuccess {
				wantRetry := strings.HasPrefix(tt.s, "retry")
				var ee *client.ExecutionError
				if !errors.As(res.Err(), &ee) || ee.CanRetry != wantRetry || ee.CallID != res.CallID || ee.RetryAfter != map[bool]time.Duration{true: e2e.RetryAfter}[wantRetry] {
					t.Fatalf("Err() = %#v, want an *ExecutionError with can_retry %v", res.Err(), wantRetry)
				}
			}
		})
	}
}

// TestClientCallID: the client sends a call_id only where it buys something. A
// tool that is neither read-only nor idempotent (SchemaTest.Sleep) gets one, so
// a repeat with the returned id is answered from the gateway's store; a
// read-only tool (Calculator.Add) gets none, so the gateway stores nothing and a
// repeat with its generated id runs again.
func TestClientCallID(t *testing.T) {
	t.Parallel()
	fleet := e2e.Start(t, e2e.Options{NATS: true})
	c := newClient(t, fleet.Addr)
	sleep := input(t, map[string]any{"duration": "0.001s"})
	first, err := c.CallTool(t.Context(), &toolfleetv1.CallToolRequest{ToolId: "SchemaTest.Sleep", Input: sleep})
	if err != nil || !first.Success {
		t.Fatalf("Sleep: %+v %v", first, err)
	}
	before := fleet.SchemaTest.Sleeps.Load()
	again, err := c.CallTool(t.Context(), &toolfleetv1.CallToolRequest{CallId: first.CallID, ToolId: "SchemaTest.Sleep", Input: sleep})
	if err != nil || !again.Success || fleet.SchemaTest.Sleeps.Load() != before {
		t.Fatalf("repeat of Sleep with %q: %+v %v, ran %d more times; want the stored result",
			first.CallID, again, err, fleet.SchemaTest.Sleeps.Load()-before)
	}
	add := input(t, map[string]any{"a": 1, "b": 2})
	res, err := c.CallTool(t.Context(), &toolfleetv1.CallToolRequest{ToolId: "Calculator.Add", Input: add})
	if err != nil || !res.Success {
		t.Fatalf("Add: %+v %v", res, err)
	}
	adds := fleet.Calculator.Adds.Load()
	if _, err := c.CallTool(t.Context(), &toolfleetv1.CallToolRequest{CallId: res.CallID, ToolId: "Calculator.Add", Input: add}); err != nil {
		t.Fatal(err)
	}
	if n := fleet.Calculator.Adds.Load() - adds; n != 1 {
		t.Fatalf("Add with its generated id ran %d times, want 1 (nothing stored for a generated id)", n)
	}
}

func TestFailureKinds(t *testing.T) {
	t.Parallel()
	fleet := e2e.Start(t, e2e.Options{})
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			c := newClient(t, fleet.Addr, p.opts...)
			tests := []struct {
				name   string
				toolID string
				input  map[string]any
				check  func(t *testing.T, res *client.Result, err error)
			}{
				{"success", "Calculator.Subtract", map[string]any{"a": 5, "b": 3}, func(t *testing.T, res *client.Result, err error) {
					if err != nil || !res.Success || res.Value.GetStructValue().GetFields()["result"].GetNumberValue() != 2 {
						t.Fatalf("got %+v, %v; want result 2", res, err)
					}
				}},
				{"unknown tool", "Calculator.Nope", nil, func(t *testing.T, res *client.Result, err error) {
					var se *client.ServerError
					if !errors.As(err, &se) || se.Code != codes.NotFound || se.Message == "" || se.CallID == "" {
						t.Fatalf("got %+v, %#v; want a NotFound *ServerError with a message and the call id", res, err)
					}
				}},
				{"validation", "Calculator.Evaluate", map[string]any{"expression": ""}, func(t *testing.T, res *client.Result, err error) {
					var ve *client.ValidationError
					if !errors.As(err, &ve) || ve.ParameterErrors["expression"] == "" {
						t.Fatalf("got %+v, %#v; want a *ValidationError on expression", res, err)
					}
				}},
				{"execution", "Calculator.Divide", map[string]any{"a": 1, "b": 0}, func(t *testing.T, res *client.Result, err error) {
					if err != nil || res.Success || res.Error.GetMessage() != "cannot divide by zero" || res.Error.GetCanRetry() {
						t.Fatalf("got %+v, %v; want an execution error", res, err)
					}
				}},
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					t.Parallel()
					res, err := c.Call(t.Context(), tt.toolID, tt.input)
					tt.check(t, res, err)
				})
			}
		})
	}
}

func TestDiscovery(t *testing.T) {
	t.Parallel()
	fleet := e2e.Start(t, e2e.Options{})
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			c := newClient(t, fleet.Addr, p.opts...)
			page, err := c.ListTools(t.Context(), &toolfleetv1.ListToolsRequest{PageSize: 2})
			if err != nil || len(page.GetTools()) != 2 || page.GetNextPageToken() == "" {
				t.Fatalf("ListTools page: %v, %v", page, err)
			}
			all, err := c.Tools(t.Context(), &toolfleetv1.ListToolsRequest{PageSize: 2})
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, d := range all {
				ids = append(ids, d.GetId())
			}
			for _, want := range []string{"Calculator.Add@1.0.0", "Calculator.Evaluate@1.0.0", "SchemaTest.Sleep@0.3.1"} {
				if !slices.Contains(ids, want) {
					t.Errorf("Tools = %v, missing %s", ids, want)
				}
			}
			d, err := c.GetTool(t.Context(), "Calculator_Add")
			if err != nil || d.GetId() != "Calculator.Add@1.0.0" {
				t.Fatalf("GetTool: %v, %v", d, err)
			}
			_, err = c.GetTool(t.Context(), "Nope.Nope")
			var se *client.ServerError
			if !errors.As(err, &se) || se.Code != codes.NotFound {
				t.Fatalf("GetTool(unknown) = %v, want NotFound", err)
			}
			found, err := c.SearchTools(t.Context(), &toolfleetv1.SearchToolsRequest{Query: "divide two numbers", Limit: 1})
			if err != nil || len(found.GetResults()) != 1 || found.GetResults()[0].GetTool().GetName() != "Divide" {
				t.Fatalf("SearchTools: %v, %v", found, err)
			}
		})
	}
}

func TestCallTools(t *testing.T) {
	t.Parallel()
	fleet := e2e.Start(t, e2e.Options{})
	c := newClient(t, fleet.Addr)
	out, err := c.CallTools(t.Context(),
		&toolfleetv1.CallToolRequest{ToolId: "Calculator.Add", Input: input(t, map[string]any{"a": 1, "b": 1})},
		&toolfleetv1.CallToolRequest{ToolId: "Calculator.Nope"},
		&toolfleetv1.CallToolRequest{ToolId: "Calculator.Evaluate", Input: input(t, map[string]any{"expression": ""})},
		&toolfleetv1.CallToolRequest{ToolId: "SchemaTest.Types", Input: input(t, map[string]any{"s": "flaky:calltools"}), Approval: approval},
	)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 4 {
		t.Fatalf("%d outcomes, want 4", len(out))
	}
	if out[0].Err != nil || !out[0].Result.Success {
		t.Errorf("Add: %+v", out[0])
	}
	var se *client.ServerError
	if !errors.As(out[1].Err, &se) || se.Code != codes.NotFound || se.CallID == "" {
		t.Errorf("unknown tool: %#v, want NotFound with a call id", out[1].Err)
	}
	var ve *client.ValidationError
	if !errors.As(out[2].Err, &ve) || ve.ParameterErrors["expression"] == "" {
		t.Errorf("validation: %#v", out[2].Err)
	}
	if out[3].Err != nil || !out[3].Result.Success || out[3].Result.Attempts != 2 {
		t.Errorf("flaky: %+v, want a success on attempt 2", out[3].Result)
	}
	if ids := fleet.SchemaTest.TypesFor("flaky:calltools"); len(ids) != 2 {
		t.Errorf("flaky tool ran with call ids %q, want two runs", ids)
	}
}

func TestAuth(t *testing.T) {
	t.Parallel()
	fleet := e2e.Start(t, e2e.Options{Auth: true})
	errSource := errors.New("vault sealed")
	tests := []struct {
		name     string
		opts     []client.Option
		wantCode codes.Code
		wantErr  error
	}{
		{"no token", nil, codes.Unauthenticated, nil},
		{"bad token", []client.Option{client.WithToken("not-a-jwt")}, codes.Unauthenticated, nil},
		{"token without the scope", []client.Option{client.WithToken(fleet.Token(t, "other"))}, codes.PermissionDenied, nil},
		{"static token", []client.Option{client.WithToken(fleet.Token(t, "tools:call"))}, codes.OK, nil},
		{"token source", []client.Option{client.WithTokenSource(func(context.Context) (string, error) { return fleet.Token(t, "tools:call"), nil })}, codes.OK, nil},
		{"token source fails", []client.Option{client.WithTokenSource(func(context.Context) (string, error) { return "", errSource })}, codes.OK, errSource},
		{"connect with token", []client.Option{client.WithConnect(nil), client.WithToken(fleet.Token(t, "tools:call"))}, codes.OK, nil},
		{"connect without token", []client.Option{client.WithConnect(nil)}, codes.Unauthenticated, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := newClient(t, fleet.Addr, tt.opts...)
			res, err := c.Call(t.Context(), "Calculator.Add", map[string]any{"a": 1, "b": 1})
			switch {
			case tt.wantErr != nil:
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
			case tt.wantCode == codes.OK:
				if err != nil || !res.Success {
					t.Fatalf("got %+v, %v; want a success", res, err)
				}
			default:
				var se *client.ServerError
				if !errors.As(err, &se) || se.Code != tt.wantCode {
					t.Fatalf("err = %v, want a %s *ServerError", err, tt.wantCode)
				}
			}
		})
	}
}

func TestDeadline(t *testing.T) {
	t.Parallel()
	fleet := e2e.Start(t, e2e.Options{})
	sleep := input(t, map[string]any{"duration": "60s"})
	tests := []struct {
		name string
		opts []client.Option
		ctx  func(t *testing.T) context.Context
	}{
		{"client default timeout", []client.Option{client.WithTimeout(300 * time.Millisecond)}, func(t *testing.T) context.Context { return t.Context() }},
		{"caller deadline", nil, func(t *testing.T) context.Context {
			ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
			t.Cleanup(cancel)
			return ctx
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := newClient(t, fleet.Addr, tt.opts...)
			_, err := c.CallTool(tt.ctx(t), &toolfleetv1.CallToolRequest{ToolId: "SchemaTest.Sleep", Input: sleep})
			var se *client.ServerError
			if !errors.As(err, &se) || se.Code != codes.DeadlineExceeded || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("err = %#v, want a DeadlineExceeded *ServerError matching context.DeadlineExceeded", err)
			}
		})
	}
}

// TestOnBehalfOf: a client whose token holds only tools:delegate calls as
// another principal with that principal's scopes, over gRPC and Connect.
func TestOnBehalfOf(t *testing.T) {
	t.Parallel()
	fleet := e2e.Start(t, e2e.Options{Auth: true})
	tests := []struct {
		name     string
		token    string
		onBehalf []string // subject, then scopes; nil = a direct call
		want     codes.Code
	}{
		{"direct call without tools:call", fleet.Token(t, "tools:delegate"), nil, codes.PermissionDenied},
		{"for a principal with tools:call", fleet.Token(t, "tools:delegate"), []string{"ana", "tools:call"}, codes.OK},
		{"for a principal without tools:call", fleet.Token(t, "tools:delegate", "tools:call"), []string{"ana", "profile"}, codes.PermissionDenied},
		{"delegation without tools:delegate", fleet.Token(t, "tools:call"), []string{"ana", "tools:call"}, codes.PermissionDenied},
	}
	for _, p := range protocols {
		for _, tt := range tests {
			t.Run(p.name+"/"+tt.name, func(t *testing.T) {
				t.Parallel()
				c := newClient(t, fleet.Addr, append([]client.Option{client.WithToken(tt.token)}, p.opts...)...)
				ctx := t.Context()
				if tt.onBehalf != nil {
					ctx = client.OnBehalfOf(ctx, tt.onBehalf[0], tt.onBehalf[1:])
				}
				res, err := c.Call(ctx, "Calculator.Add", map[string]any{"a": 1, "b": 1})
				var se *client.ServerError
				switch {
				case tt.want == codes.OK && (err != nil || !res.Success):
					t.Fatalf("got %+v %v, want a success", res, err)
				case tt.want != codes.OK && (!errors.As(err, &se) || se.Code != tt.want):
					t.Fatalf("err = %v, want %v", err, tt.want)
				}
			})
		}
	}
}
