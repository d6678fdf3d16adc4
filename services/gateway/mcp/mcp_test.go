package mcp_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolfleet/toolfleet/e2e"
	clockv1 "github.com/toolfleet/toolfleet/gen/tools/clock/v1"
	"github.com/toolfleet/toolfleet/sdk/client"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/services/gateway/mcp"
	"github.com/toolfleet/toolfleet/workers/clock/clock"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// bearer adds an Authorization header to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// connectHTTP opens an MCP session with the official Go SDK client on the
// gateway's /mcp endpoint.
func connectHTTP(t *testing.T, addr, token string, opts *sdk.ClientOptions) (*sdk.ClientSession, error) {
	t.Helper()
	hc := &http.Client{Timeout: time.Minute}
	if token != "" {
		hc.Transport = bearer{token, http.DefaultTransport}
	}
	c := sdk.NewClient(&sdk.Implementation{Name: "mcp-test", Version: "1"}, opts)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: "http://" + addr + "/mcp", HTTPClient: hc, MaxRetries: -1}, nil)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs, nil
}

// connectMemory serves a Server over the remote gateway (sdk/client backend,
// as the stdio bridge does) on an in-memory transport.
func connectMemory(t *testing.T, addr string, opts mcp.Options, copts *sdk.ClientOptions) *sdk.ClientSession {
	t.Helper()
	c, err := client.New(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	opts.Logger = quiet()
	srv := mcp.New(mcp.ClientBackend(c), opts)
	st, ct := sdk.NewInMemoryTransports()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, st) }()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "mcp-test", Version: "1"}, copts).Connect(t.Context(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.Close()
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("MCP server did not stop")
		}
	})
	return cs
}

// surfaces are the two ways a client reaches the tools.
var surfaces = []struct {
	name    string
	connect func(t *testing.T, f *e2e.Fleet) *sdk.ClientSession
}{
	{"gateway /mcp", func(t *testing.T, f *e2e.Fleet) *sdk.ClientSession {
		cs, err := connectHTTP(t, f.Addr, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}},
	{"client backend", func(t *testing.T, f *e2e.Fleet) *sdk.ClientSession {
		return connectMemory(t, f.Addr, mcp.Options{}, nil)
	}},
}

func listTools(t *testing.T, cs *sdk.ClientSession) map[string]*sdk.Tool {
	t.Helper()
	tools := map[string]*sdk.Tool{}
	for tl, err := range cs.Tools(t.Context(), nil) {
		if err != nil {
			t.Fatalf("tools/list: %v", err)
		}
		if tools[tl.Name] != nil {
			t.Fatalf("tool %s listed twice", tl.Name)
		}
		tools[tl.Name] = tl
	}
	return tools
}

func TestToolsList(t *testing.T) {
	t.Parallel()
	fleet := e2e.Start(t, e2e.Options{})
	for _, s := range surfaces {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			tools := listTools(t, s.connect(t, fleet))
			add := tools["Calculator_Add"]
			if add == nil {
				t.Fatalf("Calculator_Add not listed; got %d tools", len(tools))
			}
			if add.Title != "Calculator.Add@1.0.0" || add.Meta[mcp.MetaToolID] != "Calculator.Add@1.0.0" || add.Description == "" {
				t.Errorf("Calculator_Add: title %q, meta %v, description %q", add.Title, add.Meta, add.Description)
			}
			in, _ := json.Marshal(add.InputSchema)
			if !strings.Contains(string(in), `"a"`) || !strings.Contains(string(in), `"object"`) {
				t.Errorf("input schema %s", in)
			}
			if out, _ := json.Marshal(add.OutputSchema); !strings.Contains(string(out), `"result"`) {
				t.Errorf("output schema %s", out)
			}
			types := tools["SchemaTest_Types"]
			if types == nil || types.Title != "Every type (SchemaTest.Types@0.3.1)" {
				t.Fatalf("SchemaTest_Types: %+v", types)
			}
			// One title: annotations.title is the tool's title.
			if a := types.Annotations; a == nil || !a.ReadOnlyHint || !a.IdempotentHint || a.Title != types.Title {
				t.Errorf("SchemaTest_Types annotations %+v, want read-only and idempotent from the contract hints, title %q", a, types.Title)
			}
			if a := add.Annotations; a == nil || a.Title != add.Title {
				t.Errorf("Calculator_Add annotations %+v, want title %q", a, add.Title)
			}
		})
	}
}

func TestToolsListPages(t *testing.T) {
	t.Parallel()
	fleet := e2e.Start(t, e2e.Options{})
	cs := connectMemory(t, fleet.Addr, mcp.Options{PageSize: 2}, nil)
	first, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Tools) != 2 || first.NextCursor == "" {
		t.Fatalf("first page: %d tools, cursor %q; want 2 and a cursor", len(first.Tools), first.NextCursor)
	}
	second, err := cs.ListTools(t.Context(), &sdk.ListToolsParams{Cursor: first.NextCursor})
	if err != nil || len(second.Tools) == 0 || second.Tools[0].Name == first.Tools[0].Name {
		t.Fatalf("second page: %v, %v", second, err)
	}
	if all := listTools(t, cs); len(all) < 9 {
		t.Fatalf("%d tools over every page, want the 5 calculator and 4 schematest tools", len(all))
	}
}

func text(r *sdk.CallToolResult) string {
	if r == nil {
		return ""
	}
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func TestToolsCall(t *testing.T) {
	t.Parallel()
	fleet := e2e.Start(t, e2e.Options{})
	tests := []struct {
		name  string
		tool  string
		args  any
		check func(t *testing.T, r *sdk.CallToolResult, err error)
	}{
		{"success", "Calculator_Add", map[string]any{"a": 2, "b": 3}, func(t *testing.T, r *sdk.CallToolResult, err error) {
			if err != nil || r.IsError || text(r) != `{"result":5}` {
				t.Fatalf("got %+v, %v", r, err)
			}
			if sc, _ := r.StructuredContent.(map[string]any); sc["result"] != float64(5) {
				t.Fatalf("structuredContent %v, want {result: 5}", r.StructuredContent)
			}
			if id, _ := r.Meta[mcp.MetaCallID].(string); id == "" {
				t.Fatalf("no call id in _meta: %v", r.Meta)
			}
		}},
		{"execution error", "Calculator_Divide", map[string]any{"a": 1, "b": 0}, func(t *testing.T, r *sdk.CallToolResult, err error) {
			if err != nil || !r.IsError || !strings.HasPrefix(text(r), "cannot divide by zero") {
				t.Fatalf("got %+v (%q), %v; want isError with the tool's message", r, text(r), err)
			}
		}},
		{"validation error", "Calculator_Evaluate", map[string]any{"expression": ""}, func(t *testing.T, r *sdk.CallToolResult, err error) {
			if err != nil || !r.IsError || !strings.Contains(text(r), "- expression: ") {
				t.Fatalf("got %+v (%q), %v; want isError with the field message", r, text(r), err)
			}
		}},
		{"wrong type", "Calculator_Add", map[string]any{"a": "two"}, func(t *testing.T, r *sdk.CallToolResult, err error) {
			if err != nil || !r.IsError || !strings.Contains(text(r), "- a: ") {
				t.Fatalf("got %+v (%q), %v; want isError on field a", r, text(r), err)
			}
		}},
		{"unknown tool", "Calculator_Ad", map[string]any{}, func(t *testing.T, r *sdk.CallToolResult, err error) {
			// The closest tools, as every other surface names them.
			var je *jsonrpc.Error
			if !errors.As(err, &je) || je.Code != jsonrpc.CodeInvalidParams ||
				!strings.Contains(je.Message, `unknown tool "Calculator_Ad"; closest tools: Calculator_Add`) {
				t.Fatalf("got %+v, %#v; want a JSON-RPC invalid-params error naming Calculator_Add", r, err)
			}
		}},
		{"arguments not an object", "Calculator_Add", []int{1, 2}, func(t *testing.T, r *sdk.CallToolResult, err error) {
			// In the caller's terms: where, and what was wrong; no decoder internals.
			var je *jsonrpc.Error
			if !errors.As(err, &je) || je.Code != jsonrpc.CodeInvalidParams ||
				!strings.Contains(je.Message, "arguments of Calculator_Add must be a JSON object: line 1, column 1: ") || strings.Contains(je.Message, "proto:") {
				t.Fatalf("got %+v, %#v; want a JSON-RPC invalid-params error with the position", r, err)
			}
		}},
	}
	for _, s := range surfaces {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			cs := s.connect(t, fleet)
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					t.Parallel()
					r, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: tt.tool, Arguments: tt.args})
					tt.check(t, r, err)
				})
			}
		})
	}
}

func TestCallIDIsIdempotencyKey(t *testing.T) {
	t.Parallel()
	fleet := e2e.Start(t, e2e.Options{NATS: true})
	cs, err := connectHTTP(t, fleet.Addr, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		r, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "Calculator_Add", Arguments: map[string]any{"a": 1, "b": 1},
			Meta: sdk.Meta{mcp.MetaCallID: "mcp-once"}})
		if err != nil || r.IsError || r.Meta[mcp.MetaCallID] != "mcp-once" {
			t.Fatalf("got %+v, %v", r, err)
		}
	}
	if n := fleet.Calculator.Adds.Load(); n != 1 {
		t.Fatalf("Add ran %d times for one call id, want 1", n)
	}
	// The same call id with another input is a JSON-RPC error, and runs nothing.
	_, err = cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "Calculator_Add", Arguments: map[string]any{"a": 50, "b": 50},
		Meta: sdk.Meta{mcp.MetaCallID: "mcp-once"}})
	var rpcErr *jsonrpc.Error
	if !errors.As(err, &rpcErr) || !strings.Contains(rpcErr.Message, "AlreadyExists") || !strings.Contains(rpcErr.Message, "another input") {
		t.Fatalf("other input: %v, want a JSON-RPC error saying AlreadyExists and another input", err)
	}
	if n := fleet.Calculator.Adds.Load(); n != 1 {
		t.Fatalf("Add ran %d times, want still 1", n)
	}
}

// TestApprovalOverMCP: KV-like approval rules hold on MCP too: SchemaTest.Types
// requires approval; without toolfleet/approver in _meta (and a client that
// cannot be asked: no elicitation) it is an isError result saying so, with it
// the tool runs.
func TestApprovalOverMCP(t *testing.T) {
	t.Parallel()
	fleet := e2e.Start(t, e2e.Options{})
	cs, err := connectHTTP(t, fleet.Addr, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	args := map[string]any{"s": "hi"}
	r, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "SchemaTest_Types", Arguments: args})
	if err != nil || !r.IsError || !strings.Contains(text(r), "requires an approval") {
		t.Fatalf("without approval: %+v %v, want an isError result saying it requires an approval", r, err)
	}
	r, err = cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "SchemaTest_Types", Arguments: args, Meta: sdk.Meta{mcp.MetaApprover: "ana"}})
	if err != nil || r.IsError {
		t.Fatalf("with approval: %+v %v", r, err)
	}
}

func TestAuth(t *testing.T) {
	t.Parallel()
	fleet := e2e.Start(t, e2e.Options{Auth: true})

	if _, err := connectHTTP(t, fleet.Addr, "", nil); err == nil {
		t.Fatal("connected without a token")
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+fleet.Addr+"/mcp", strings.NewReader(`{}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
		t.Fatalf("no token: %s %v, want 401 with WWW-Authenticate: Bearer", resp.Status, resp.Header)
	}

	cs, err := connectHTTP(t, fleet.Addr, fleet.Token(t, "tools:call"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "Calculator_Add", Arguments: map[string]any{"a": 1, "b": 1}}); err != nil || r.IsError {
		t.Fatalf("with a token: %+v, %v", r, err)
	}
	narrow, err := connectHTTP(t, fleet.Addr, fleet.Token(t, "tools:call:calculator.*"), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = narrow.CallTool(t.Context(), &sdk.CallToolParams{Name: "SchemaTest_Sleep", Arguments: map[string]any{}})
	var je *jsonrpc.Error
	if !errors.As(err, &je) || !strings.Contains(je.Message, "PermissionDenied") {
		t.Fatalf("token without the toolkit's scope: %#v, want a JSON-RPC error saying PermissionDenied", err)
	}
}

func TestProgressAndCancel(t *testing.T) {
	t.Parallel()
	fleet := e2e.Start(t, e2e.Options{})
	progressed := make(chan string, 16)
	copts := &sdk.ClientOptions{ProgressNotificationHandler: func(_ context.Context, r *sdk.ProgressNotificationClientRequest) {
		select {
		case progressed <- r.Params.Message:
		default:
		}
	}}
	cs, err := connectHTTP(t, fleet.Addr, "", copts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		p := &sdk.CallToolParams{Name: "SchemaTest_Sleep", Arguments: map[string]any{"duration": "60s"}}
		p.SetProgressToken("sleep-1")
		_, err := cs.CallTool(ctx, p)
		done <- err
	}()
	select {
	case msg := <-progressed:
		if !strings.Contains(msg, "SchemaTest.Sleep@0.3.1 running for") {
			t.Errorf("progress message %q", msg)
		}
	case err := <-done:
		t.Fatalf("the call ended before any progress: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("no progress notification")
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled call returned %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the cancelled call did not return")
	}
	deadline := time.Now().Add(20 * time.Second)
	for fleet.SchemaTest.Cancelled.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the worker's Sleep was not cancelled: notifications/cancelled did not reach the tool")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestListChanged(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		connect func(t *testing.T, f *e2e.Fleet, copts *sdk.ClientOptions) *sdk.ClientSession
	}{
		{"gateway /mcp", func(t *testing.T, f *e2e.Fleet, copts *sdk.ClientOptions) *sdk.ClientSession {
			cs, err := connectHTTP(t, f.Addr, "", copts)
			if err != nil {
				t.Fatal(err)
			}
			return cs
		}},
		// tools/list never re-reads here (MaxStaleness), so the clock's tools can
		// only appear through the poller, and the only notification is theirs.
		{"client backend, poller only", func(t *testing.T, f *e2e.Fleet, copts *sdk.ClientOptions) *sdk.ClientSession {
			return connectMemory(t, f.Addr, mcp.Options{PollInterval: 100 * time.Millisecond, MaxStaleness: time.Hour}, copts)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fleet := e2e.Start(t, e2e.Options{NATS: true})
			var changes atomic.Int64
			changed := make(chan struct{}, 1)
			cs := tt.connect(t, fleet, &sdk.ClientOptions{ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) {
				changes.Add(1)
				select {
				case changed <- struct{}{}:
				default:
				}
			}})
			if tools := listTools(t, cs); tools["Clock_Now"] != nil || tools["Calculator_Add"] == nil {
				t.Fatal("want the calculator and no clock before the clock worker starts")
			}
			fleet.AddWorker(t, func(w *tool.Worker) { clockv1.RegisterClockServiceServer(w, clock.New()) })
			// Over HTTP the first notification may come from the session's first
			// read of the list: wait for one after which the clock is listed.
			deadline := time.After(30 * time.Second)
			for {
				select {
				case <-changed:
				case <-deadline:
					t.Fatalf("no notifications/tools/list_changed announcing the clock's tools (%d notifications)", changes.Load())
				}
				if tools := listTools(t, cs); tools["Clock_Now"] != nil {
					if title := tools["Clock_Now"].Title; !strings.Contains(title, "Clock.Now@") {
						t.Fatalf("Clock_Now title %q", title)
					}
					return
				}
			}
		})
	}
}

// TestGatewayStopsWithSessionsOpen: a connected client's notification stream
// must not hold the gateway's graceful stop until its (here very long) deadline.
func TestGatewayStopsWithSessionsOpen(t *testing.T) {
	t.Parallel()
	fleet, err := e2e.New(t.Context(), e2e.Options{ShutdownTimeout: 10 * time.Minute, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	cs, err := connectHTTP(t, fleet.Addr, "", nil)
	if err != nil {
		_ = fleet.Close()
		t.Fatal(err)
	}
	if _, err := cs.ListTools(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- fleet.Close() }()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the gateway did not stop while an MCP session was open")
	}
}
