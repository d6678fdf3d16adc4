package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	conformancev1 "github.com/toolfleet/toolfleet/gen/tools/conformance/v1"
	"github.com/toolfleet/toolfleet/internal/natsx/natstest"
	"github.com/toolfleet/toolfleet/sdk/client"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/services/gateway"
	"github.com/toolfleet/toolfleet/services/gateway/mcp"
	"github.com/toolfleet/toolfleet/workers/conformance/conformance"
)

const elicit = toolfleetv1.ClientCapability_CLIENT_CAPABILITY_ELICITATION

func answer(t *testing.T, v map[string]any) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(v)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func valueText(resp *toolfleetv1.CallToolResponse) string {
	b, _ := protojson.Marshal(resp.GetValue())
	return string(b)
}

// TestClientInputRounds: a tool asks its caller for input over gRPC. Two
// gateways share the sealing key through NATS: round 1 on A, round 2 on B.
// A changed, foreign or expired request_state, and oversized answers, are
// refused before the worker runs; a caller that cannot answer is refused
// up front; an input_required outcome is not stored for call_id repeats.
func TestClientInputRounds(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	w, _ := startWorker(t, srv.URL(), func(w *tool.Worker) {
		conformancev1.RegisterConformanceServiceServer(w, conformance.New())
	})
	_ = w
	a := startGateway(t, gateway.Config{NATSURL: srv.URL()})
	b := startGateway(t, gateway.Config{NATSURL: srv.URL()})
	short := startGateway(t, gateway.Config{NATSURL: srv.URL(), ClientInput: gateway.ClientInputConfig{TTL: time.Nanosecond}})
	const stateTool = "Conformance.InputRequiredRequestState"
	for _, g := range []*gateway.Gateway{a, b, short} {
		waitTool(t, g, stateTool)
	}
	ca, cb, cs := grpcClient(t, a.Addr()), grpcClient(t, b.Addr()), grpcClient(t, short.Addr())
	ctxAs := func(sub string) context.Context {
		tok := signHS(t, map[string]any{"sub": sub, "scope": "tools:call", "exp": time.Now().Add(10 * time.Minute).Unix()})
		return metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+tok)
	}
	ctx := ctxAs("tester")
	round1 := func(t *testing.T, c toolfleetv1.ToolGatewayServiceClient, callID string) *toolfleetv1.InputRequired {
		t.Helper()
		resp, err := c.CallTool(ctx, &toolfleetv1.CallToolRequest{ToolId: stateTool, CallId: callID, ClientInput: []toolfleetv1.ClientCapability{elicit}})
		if err != nil {
			t.Fatalf("round 1: %v", err)
		}
		ir := resp.GetInputRequired()
		if ir == nil || resp.GetSuccess() || ir.GetRequests()["confirm"].GetMethod() != tool.MethodElicit || ir.GetRequestState() == "" {
			t.Fatalf("round 1: %v, want input_required asking confirm with a request_state", resp)
		}
		if strings.Contains(ir.GetRequestState(), "confirm-pending") {
			t.Fatalf("request_state shows the worker's state: %s", ir.GetRequestState())
		}
		return ir
	}
	confirm := map[string]*structpb.Struct{"confirm": answer(t, map[string]any{"action": "accept", "content": map[string]any{"ok": true}})}

	t.Run("round 1 on A, round 2 on B", func(t *testing.T) {
		ir := round1(t, ca, "")
		resp, err := cb.CallTool(ctx, &toolfleetv1.CallToolRequest{ToolId: stateTool, ClientInput: []toolfleetv1.ClientCapability{elicit},
			InputResponses: confirm, RequestState: ir.GetRequestState()})
		if err != nil || !resp.GetSuccess() || !strings.Contains(valueText(resp), conformance.StateOK) {
			t.Fatalf("round 2 on B: %v %v, want %s", resp, err, conformance.StateOK)
		}
	})

	t.Run("OXP HTTP", func(t *testing.T) {
		tok := token(t, "tools:call")
		post := func(request map[string]any) map[string]any {
			t.Helper()
			body, _ := json.Marshal(map[string]any{"request": request})
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+a.Addr()+"/tools/call", bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+tok)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = resp.Body.Close() }()
			var out struct {
				Result map[string]any `json:"result"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("POST /tools/call: %d %v", resp.StatusCode, err)
			}
			return out.Result
		}
		r1 := post(map[string]any{"tool_id": stateTool, "client_input": []string{"CLIENT_CAPABILITY_ELICITATION"}})
		ir, _ := r1["input_required"].(map[string]any)
		state, _ := ir["request_state"].(string)
		if state == "" || r1["success"] != false {
			t.Fatalf("round 1 over HTTP: %v", r1)
		}
		r2 := post(map[string]any{"tool_id": stateTool, "client_input": []string{"CLIENT_CAPABILITY_ELICITATION"},
			"input_responses": map[string]any{"confirm": map[string]any{"action": "accept", "content": map[string]any{"ok": true}}}, "request_state": state})
		if v, _ := json.Marshal(r2["value"]); r2["success"] != true || !strings.Contains(string(v), conformance.StateOK) {
			t.Fatalf("round 2 over HTTP: %v", r2)
		}
	})

	t.Run("event", func(t *testing.T) {
		round1(t, ca, "")
		msgs := streamEventsOn(t, srv.URL(), gateway.EventSubjectPrefix+"Conformance.InputRequiredRequestState."+gateway.EventInputRequired, 1)
		if !strings.Contains(string(msgs[0].Data), `"input_required"`) {
			t.Fatalf("input_required event %s", msgs[0].Data)
		}
	})

	t.Run("refused states", func(t *testing.T) {
		ir := round1(t, ca, "")
		st := ir.GetRequestState()
		flipped := []byte(st)
		flipped[len(flipped)/2] ^= 1
		if flipped[len(flipped)/2] == '.' || flipped[len(flipped)/2] == '/' {
			flipped[len(flipped)/2] = 'A'
		}
		expired := round1(t, cs, "").GetRequestState()
		for _, tt := range []struct {
			name, state string
			ctx         context.Context
			c           toolfleetv1.ToolGatewayServiceClient
		}{
			{"tampered suffix", st + "-TAMPERED", ctx, cb},
			{"one bit changed", string(flipped), ctx, cb},
			{"not a state", "hello", ctx, ca},
			{"another tenant", st, ctxAs("other-tenant"), cb},
			{"expired", expired, ctx, cs},
		} {
			_, err := tt.c.CallTool(tt.ctx, &toolfleetv1.CallToolRequest{ToolId: stateTool, ClientInput: []toolfleetv1.ClientCapability{elicit},
				InputResponses: confirm, RequestState: tt.state})
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "request_state") {
				t.Errorf("%s: %v, want InvalidArgument about request_state", tt.name, err)
			}
		}
		// Answers without the state reach the worker without it: it asks again.
		resp, err := cb.CallTool(ctx, &toolfleetv1.CallToolRequest{ToolId: stateTool, ClientInput: []toolfleetv1.ClientCapability{elicit}, InputResponses: confirm})
		if err != nil || resp.GetInputRequired() == nil {
			t.Errorf("answers without request_state: %v %v, want the question again", resp, err)
		}
	})

	// A run or program asks the person through the orchestrator (a delegated
	// call): the question waits in the inbox as long as the run does, so its
	// state outlives the direct callers' TTL (1 ns on short).
	t.Run("delegated calls keep their state past the TTL", func(t *testing.T) {
		tok := signHS(t, map[string]any{"sub": "orchestrator", "scope": "tools:call tools:delegate", "exp": time.Now().Add(10 * time.Minute).Unix()})
		dctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+tok, "toolfleet-on-behalf-of", "alice", "toolfleet-on-behalf-scopes", "tools:call")
		resp, err := cs.CallTool(dctx, &toolfleetv1.CallToolRequest{ToolId: stateTool, ClientInput: []toolfleetv1.ClientCapability{elicit}})
		if err != nil || resp.GetInputRequired().GetRequestState() == "" {
			t.Fatalf("delegated round 1: %v %v", resp, err)
		}
		time.Sleep(10 * time.Millisecond) // past the direct callers' TTL
		resp, err = cs.CallTool(dctx, &toolfleetv1.CallToolRequest{ToolId: stateTool, ClientInput: []toolfleetv1.ClientCapability{elicit},
			InputResponses: confirm, RequestState: resp.GetInputRequired().GetRequestState()})
		if err != nil || !resp.GetSuccess() || !strings.Contains(valueText(resp), conformance.StateOK) {
			t.Fatalf("delegated round 2 after the direct TTL: %v %v, want %s", resp, err, conformance.StateOK)
		}
	})

	t.Run("large answers reach the worker", func(t *testing.T) {
		ir := round1(t, ca, "")
		large := answer(t, map[string]any{"action": "accept", "content": map[string]any{"ok": true, "note": strings.Repeat("x", 900<<10)}})
		resp, err := cb.CallTool(ctx, &toolfleetv1.CallToolRequest{ToolId: stateTool, ClientInput: []toolfleetv1.ClientCapability{elicit},
			InputResponses: map[string]*structpb.Struct{"confirm": large}, RequestState: ir.GetRequestState()})
		if err != nil || !strings.Contains(valueText(resp), conformance.StateOK) {
			t.Fatalf("900 KiB of answers: %v %v", resp, err)
		}
	})

	t.Run("oversized answers", func(t *testing.T) {
		big := answer(t, map[string]any{"action": "accept", "content": map[string]any{"ok": strings.Repeat("x", tool.MaxInputAnswersBytes)}})
		_, err := ca.CallTool(ctx, &toolfleetv1.CallToolRequest{ToolId: stateTool, ClientInput: []toolfleetv1.ClientCapability{elicit},
			InputResponses: map[string]*structpb.Struct{"confirm": big}})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "over the limit") {
			t.Fatalf("answers over %d bytes: %v, want InvalidArgument", tool.MaxInputAnswersBytes, err)
		}
	})

	t.Run("caller that cannot answer", func(t *testing.T) {
		_, err := ca.CallTool(ctx, &toolfleetv1.CallToolRequest{ToolId: stateTool})
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), "elicitation") {
			t.Fatalf("no client_input: %v, want FailedPrecondition naming elicitation", err)
		}
		// An optional kind the caller cannot answer is not asked.
		resp, err := ca.CallTool(ctx, &toolfleetv1.CallToolRequest{ToolId: "Conformance.InputRequiredCapabilities",
			ClientInput: []toolfleetv1.ClientCapability{toolfleetv1.ClientCapability_CLIENT_CAPABILITY_SAMPLING}})
		if err != nil || len(resp.GetInputRequired().GetRequests()) != 1 || resp.GetInputRequired().GetRequests()["greeting"].GetMethod() != tool.MethodSample {
			t.Fatalf("sampling only: %v %v, want one sampling question", resp, err)
		}
	})

	t.Run("call_id", func(t *testing.T) {
		ir := round1(t, ca, "mrtr-1") // not stored: round 2 with the same call_id runs
		resp, err := cb.CallTool(ctx, &toolfleetv1.CallToolRequest{ToolId: stateTool, CallId: "mrtr-1", ClientInput: []toolfleetv1.ClientCapability{elicit},
			InputResponses: confirm, RequestState: ir.GetRequestState()})
		if err != nil || !strings.Contains(valueText(resp), conformance.StateOK) {
			t.Fatalf("round 2 with the call_id: %v %v", resp, err)
		}
		// The finished call is stored: a repeat, even without answers, gets it.
		again, err := ca.CallTool(ctx, &toolfleetv1.CallToolRequest{ToolId: stateTool, CallId: "mrtr-1", ClientInput: []toolfleetv1.ClientCapability{elicit}})
		if err != nil || again.GetInputRequired() != nil || valueText(again) != valueText(resp) {
			t.Fatalf("repeat of the finished call: %v %v, want the stored result", again, err)
		}
	})
}

// TestClientInputContract: a worker asking for a kind its contract does not
// declare gets an execution error (a bug of the tool); over MCP a tool that
// requires approval and asks for input asks for the approval first, then its
// own question, and an approval given in the client holds for every round.
func TestClientInputContract(t *testing.T) {
	t.Parallel()
	undeclared := startPlainCalculator(t, 2)
	ask := func(ctx context.Context, _ float64) error {
		if _, ok := tool.InputResponse(ctx, "sure"); ok {
			return nil
		}
		return tool.AskInput(tool.Elicit("sure", "Add them?", map[string]any{"type": "object", "properties": map[string]any{"yes": map[string]any{"type": "boolean"}}}))
	}
	undeclared.onAddCtx.Store(&ask)
	both := startPlainCalculator(t, 3, func(o *toolfleetv1.ToolOptions) {
		o.RequiresApproval = true
		o.ClientInput = []toolfleetv1.ClientCapability{elicit}
	})
	both.onAddCtx.Store(&ask)
	g := startGateway(t, gateway.Config{Workers: []string{undeclared.addr, both.addr}})
	waitTool(t, g, "Calculator.Add@2")
	waitTool(t, g, "Calculator.Add@3")
	tok := token(t, "tools:call", "tools:approve")
	ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+tok)

	resp, err := grpcClient(t, g.Addr()).CallTool(ctx, &toolfleetv1.CallToolRequest{ToolId: "Calculator.Add@2",
		Input: answer(t, map[string]any{"a": 1, "b": 2}), ClientInput: []toolfleetv1.ClientCapability{elicit}})
	if err != nil || resp.GetSuccess() || resp.GetInputRequired() != nil || !strings.Contains(resp.GetError().GetMessage(), "does not declare") {
		t.Fatalf("an undeclared kind: %v %v, want an execution error", resp, err)
	}

	var questions []string
	var approvals atomic.Int64
	cs := connectMCP(t, g.Addr(), tok, &sdk.ClientOptions{
		ElicitationHandler: func(_ context.Context, req *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
			questions = append(questions, req.Params.Message)
			if strings.Contains(req.Params.Message, "approval") {
				approvals.Add(1)
				return &sdk.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}, nil
			}
			return &sdk.ElicitResult{Action: "accept", Content: map[string]any{"yes": true}}, nil
		}})
	before := both.adds.Load()
	r, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "Calculator_Add", Arguments: map[string]any{"a": 2, "b": 3}})
	if err != nil || r.IsError {
		t.Fatalf("approval + input over MCP: %v %+v", err, r)
	}
	if len(questions) != 2 || !strings.Contains(questions[0], "approval") || questions[1] != "Add them?" || approvals.Load() != 1 {
		t.Fatalf("questions %q, want the approval first, then the tool's question, once each", questions)
	}
	if n := both.adds.Load() - before; n != 2 {
		t.Fatalf("the tool ran %d times, want 2 (the question, then the answer)", n)
	}

	// A client that did not declare elicitation: -32021 naming it, nothing runs.
	before = both.adds.Load()
	_, err = connectMCP(t, g.Addr(), tok, nil).CallTool(t.Context(), &sdk.CallToolParams{Name: "Calculator_Add", Arguments: map[string]any{"a": 2, "b": 3}})
	var rpcErr *jsonrpc.Error
	if !errors.As(err, &rpcErr) || rpcErr.Code != sdk.CodeMissingRequiredClientCapabilities || !strings.Contains(string(rpcErr.Data), `"elicitation":{}`) {
		t.Fatalf("no elicitation capability: %v, want -32021 naming elicitation", err)
	}
	// A 2025-11-25 client on the stateless /mcp cannot be asked: isError.
	old := connectMCPAt(t, g.Addr(), tok, "2025-11-25", &sdk.ClientOptions{
		ElicitationHandler: func(context.Context, *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
			return &sdk.ElicitResult{Action: "decline"}, nil
		}})
	r, err = old.CallTool(t.Context(), &sdk.CallToolParams{Name: "Calculator_Add", Arguments: map[string]any{"a": 2, "b": 3}})
	if err != nil || !r.IsError || !strings.Contains(r.Content[0].(*sdk.TextContent).Text, "cannot be asked") {
		t.Fatalf("a 2025-11-25 client: %v %+v, want isError saying it cannot be asked", err, r)
	}
	if n := both.adds.Load() - before; n != 0 {
		t.Fatalf("the tool ran %d times for callers that cannot answer", n)
	}

	// The stdio bridge (a session) asks a 2025-11-25 client with
	// elicitation/create requests: the approval, then the tool's question.
	c, err := client.New(g.Addr(), client.WithToken(tok))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	bridge := mcp.New(mcp.ClientBackend(c), mcp.Options{Logger: quiet()})
	st, ct := sdk.NewInMemoryTransports()
	sctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- bridge.Serve(sctx, st) }()
	questions = nil
	bs, err := sdk.NewClient(&sdk.Implementation{Name: "bridge-test", Version: "1"}, &sdk.ClientOptions{
		ElicitationHandler: func(_ context.Context, req *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
			questions = append(questions, req.Params.Message)
			if strings.Contains(req.Params.Message, "approval") {
				return &sdk.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}, nil
			}
			return &sdk.ElicitResult{Action: "accept", Content: map[string]any{"yes": true}}, nil
		}}).Connect(t.Context(), ct, &sdk.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = bs.Close()
		cancel()
		<-served
	})
	before = both.adds.Load()
	r, err = bs.CallTool(t.Context(), &sdk.CallToolParams{Name: "Calculator_Add", Arguments: map[string]any{"a": 4, "b": 5}})
	if err != nil || r.IsError || len(questions) != 2 || questions[1] != "Add them?" || both.adds.Load()-before != 2 {
		t.Fatalf("through the bridge at 2025-11-25: %v %+v, questions %q, ran %d times", err, r, questions, both.adds.Load()-before)
	}
}

// connectMCP opens a 2026-07-28 session with the Go SDK client, which answers
// input_required with its handlers.
func connectMCP(t *testing.T, addr, tok string, opts *sdk.ClientOptions) *sdk.ClientSession {
	t.Helper()
	return connectMCPAt(t, addr, tok, "2026-07-28", opts)
}

func connectMCPAt(t *testing.T, addr, tok, version string, opts *sdk.ClientOptions) *sdk.ClientSession {
	t.Helper()
	c := sdk.NewClient(&sdk.Implementation{Name: "clientinput-test", Version: "1"}, opts)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: "http://" + addr + "/mcp",
		HTTPClient: &http.Client{Transport: bearerTransport{tok}, Timeout: time.Minute}, MaxRetries: -1},
		&sdk.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}
