package mcp_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/toolfleet/toolfleet/e2e"
	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/client"
	"github.com/toolfleet/toolfleet/services/gateway/mcp"
)

const (
	v2026 = "2026-07-28"
	v2025 = "2025-11-25"
)

// connectAt opens a session with the official Go SDK client at protocol
// version v through transport rt (nil: the default), with opts.
func connectAt(t *testing.T, endpoint, v string, rt http.RoundTripper, opts *sdk.ClientOptions) *sdk.ClientSession {
	t.Helper()
	hc := &http.Client{Timeout: time.Minute, Transport: rt}
	c := sdk.NewClient(&sdk.Implementation{Name: "mcp-test", Version: "1"}, opts)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: endpoint, HTTPClient: hc, MaxRetries: -1},
		&sdk.ClientSessionOptions{ProtocolVersion: v})
	if err != nil {
		t.Fatalf("connect at %s: %v", v, err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// TestRevisions: the same /mcp serves a 2026-07-28 client (server/discover,
// no initialize) and a 2025-11-25 client (initialize), without sessions.
func TestRevisions(t *testing.T) {
	t.Parallel()
	fleet := e2e.Start(t, e2e.Options{})
	for _, v := range []string{v2026, v2025} {
		t.Run(v, func(t *testing.T) {
			t.Parallel()
			var sessionIDs atomic.Int64
			rt := roundTripFunc(func(r *http.Request) (*http.Response, error) {
				resp, err := http.DefaultTransport.RoundTrip(r)
				if err == nil && resp.Header.Get("Mcp-Session-Id") != "" {
					sessionIDs.Add(1)
				}
				return resp, err
			})
			cs := connectAt(t, "http://"+fleet.Addr+"/mcp", v, rt, nil)
			if got := cs.InitializeResult().ProtocolVersion; got != v {
				t.Fatalf("negotiated %s, want %s", got, v)
			}
			if tools := listTools(t, cs); tools["Calculator_Add"] == nil {
				t.Fatal("Calculator_Add not listed")
			}
			r, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "Calculator_Add", Arguments: map[string]any{"a": 2, "b": 3}})
			if err != nil || r.IsError || text(r) != `{"result":5}` {
				t.Fatalf("call: %+v %v", r, err)
			}
			if n := sessionIDs.Load(); n != 0 {
				t.Fatalf("%d responses carried an Mcp-Session-Id: the handler is not stateless", n)
			}
		})
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestAnyReplicaAnswers: two gateways on the same NATS and workers; every
// request of one client goes to the other gateway than the one before. The
// session works at both revisions, a call_id repeated on the other replica
// is not run again, and an approval asked by one replica is answered to the
// other.
func TestAnyReplicaAnswers(t *testing.T) {
	t.Parallel()
	fleet := e2e.Start(t, e2e.Options{NATS: true})
	addrs := []string{fleet.Addr, fleet.Replica(t)}
	for _, v := range []string{v2026, v2025} {
		t.Run(v, func(t *testing.T) {
			var n atomic.Int64
			served := map[string]*atomic.Int64{addrs[0]: {}, addrs[1]: {}}
			rt := roundTripFunc(func(r *http.Request) (*http.Response, error) {
				r = r.Clone(r.Context())
				r.URL.Host = addrs[n.Add(1)%2]
				r.Host = r.URL.Host
				served[r.URL.Host].Add(1)
				return http.DefaultTransport.RoundTrip(r)
			})
			cs := connectAt(t, "http://"+fleet.Addr+"/mcp", v, rt, &sdk.ClientOptions{
				ElicitationHandler: func(_ context.Context, req *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
					return &sdk.ElicitResult{Action: "accept", Content: map[string]any{"approve": true, "approver": "ana"}}, nil
				}})
			for range 3 {
				if tools := listTools(t, cs); tools["Calculator_Add"] == nil {
					t.Fatal("Calculator_Add not listed")
				}
			}
			before := fleet.Calculator.Adds.Load()
			callID := "replicas-" + v
			for range 2 { // one call per replica
				p := &sdk.CallToolParams{Name: "Calculator_Add", Arguments: map[string]any{"a": 1, "b": 1}, Meta: sdk.Meta{mcp.MetaCallID: callID}}
				if r, err := cs.CallTool(t.Context(), p); err != nil || r.IsError {
					t.Fatalf("call: %+v %v", r, err)
				}
			}
			if d := fleet.Calculator.Adds.Load() - before; d != 1 {
				t.Fatalf("the same call_id on two replicas ran the tool %d times, want 1", d)
			}
			if v == v2026 {
				// input_required from one replica, the answer to the other.
				r, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "SchemaTest_Types", Arguments: map[string]any{"s": "hi"}})
				if err != nil || r.IsError {
					t.Fatalf("approved call across replicas: %+v %v", r, err)
				}
			}
			for a, c := range served {
				if c.Load() == 0 {
					t.Fatalf("replica %s served no request", a)
				}
			}
		})
	}
}

// rawResponse is one JSON-RPC answer of a raw POST.
type rawResponse struct {
	Status int
	Header http.Header
	Result map[string]any
	Error  *jsonrpc.Error
}

// post sends one JSON-RPC request at 2026-07-28 with the standard headers
// (Mcp-Method from method, Mcp-Name from name; extra overrides them).
func post(t *testing.T, addr, method, name string, params map[string]any, extra http.Header) rawResponse {
	t.Helper()
	if params == nil {
		params = map[string]any{}
	}
	meta, _ := params["_meta"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
	}
	meta[sdk.MetaKeyProtocolVersion] = v2026
	meta[sdk.MetaKeyClientInfo] = map[string]any{"name": "raw", "version": "1"}
	if meta[sdk.MetaKeyClientCapabilities] == nil {
		meta[sdk.MetaKeyClientCapabilities] = map[string]any{}
	}
	params["_meta"] = meta
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+addr+"/mcp", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", v2026)
	req.Header.Set("Mcp-Method", method)
	if name != "" {
		req.Header.Set("Mcp-Name", name)
	}
	for k, vs := range extra {
		req.Header[k] = vs
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	out := rawResponse{Status: resp.StatusCode, Header: resp.Header}
	var msg struct {
		Result map[string]any `json:"result"`
		Error  *jsonrpc.Error `json:"error"`
	}
	var payload []byte
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 4<<20)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok && strings.Contains(d, `"id":1`) {
				payload = []byte(d)
			}
		}
	} else {
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		payload = b.Bytes()
	}
	if json.Unmarshal(payload, &msg) == nil {
		out.Result, out.Error = msg.Result, msg.Error
	}
	return out
}

// TestStatelessCore: server/discover without initialize; routing headers
// checked (-32020 on a mismatch); cache hints and a sorted list; input
// schemas as the contract has them (JSON Schema 2020-12, keywords kept).
func TestStatelessCore(t *testing.T) {
	t.Parallel()
	fleet := e2e.Start(t, e2e.Options{})

	d := post(t, fleet.Addr, "server/discover", "", nil, nil)
	if d.Status != http.StatusOK || d.Error != nil {
		t.Fatalf("server/discover: %d %+v", d.Status, d.Error)
	}
	if vs, _ := d.Result["supportedVersions"].([]any); !slices.Contains(vs, any(v2026)) || !slices.Contains(vs, any(v2025)) {
		t.Fatalf("supportedVersions %v, want both %s and %s", d.Result["supportedVersions"], v2026, v2025)
	}
	if caps, _ := d.Result["capabilities"].(map[string]any); caps["tools"] == nil {
		t.Fatalf("capabilities %v, want tools", d.Result["capabilities"])
	}

	l := post(t, fleet.Addr, "tools/list", "", nil, nil)
	if l.Error != nil {
		t.Fatalf("tools/list without initialize: %+v", l.Error)
	}
	if ttl, _ := l.Result["ttlMs"].(float64); ttl != float64(mcp.DefaultListTTL.Milliseconds()) || l.Result["cacheScope"] != "public" {
		t.Fatalf("cache hints ttlMs=%v cacheScope=%v, want %d and public (no token)", l.Result["ttlMs"], l.Result["cacheScope"], mcp.DefaultListTTL.Milliseconds())
	}
	tools, _ := l.Result["tools"].([]any)
	var names []string
	var typesSchema map[string]any
	for _, x := range tools {
		tl := x.(map[string]any)
		names = append(names, tl["name"].(string))
		if tl["name"] == "SchemaTest_Types" {
			typesSchema, _ = tl["inputSchema"].(map[string]any)
		}
	}
	if len(names) < 4 || !slices.IsSorted(names) {
		t.Fatalf("tools %v: want every tool, sorted by name", names)
	}
	def, err := fleet.Gateway.GetTool(&toolfleetv1.GetToolRequest{ToolId: "SchemaTest.Types"})
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]any
	b, _ := protojson.Marshal(def.GetTool().GetInputSchema())
	_ = json.Unmarshal(b, &want)
	delete(want, "$schema") // MCP's inputSchema is 2020-12 by default; the rest is the contract's
	delete(typesSchema, "$schema")
	gb, _ := json.Marshal(typesSchema)
	wb, _ := json.Marshal(want)
	if !bytes.Equal(gb, wb) {
		t.Fatalf("SchemaTest_Types inputSchema differs from the contract's:\n got %s\nwant %s", gb, wb)
	}

	c := post(t, fleet.Addr, "tools/call", "Calculator_Add", map[string]any{"name": "Calculator_Add", "arguments": map[string]any{"a": 1, "b": 2}}, nil)
	if c.Error != nil || c.Result["isError"] == true {
		t.Fatalf("tools/call: %+v %v", c.Error, c.Result)
	}
	for _, tt := range []struct {
		name   string
		header http.Header
	}{
		{"Mcp-Name mismatch", http.Header{"Mcp-Name": {"Calculator_Multiply"}}},
		{"Mcp-Method mismatch", http.Header{"Mcp-Method": {"tools/list"}}},
		{"no Mcp-Name", http.Header{"Mcp-Name": {""}}},
	} {
		before := fleet.Calculator.Adds.Load()
		r := post(t, fleet.Addr, "tools/call", "Calculator_Add", map[string]any{"name": "Calculator_Add", "arguments": map[string]any{"a": 1, "b": 2}}, tt.header)
		if r.Status != http.StatusBadRequest || r.Error == nil || r.Error.Code != sdk.CodeHeaderMismatch {
			t.Errorf("%s: %d %+v, want 400 with JSON-RPC %d", tt.name, r.Status, r.Error, sdk.CodeHeaderMismatch)
		}
		if fleet.Calculator.Adds.Load() != before {
			t.Errorf("%s: the tool ran", tt.name)
		}
	}
	if g := getMCP(t, fleet.Addr); g != http.StatusMethodNotAllowed {
		t.Fatalf("GET /mcp: %d, want 405 (no server-initiated stream on a stateless server)", g)
	}
}

func getMCP(t *testing.T, addr string) int {
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+addr+"/mcp", nil)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// TestTraceparentInMeta: a traceparent in a tools/call's _meta is the parent
// of the call the gateway sends the worker.
func TestTraceparentInMeta(t *testing.T) {
	t.Parallel()
	fleet := e2e.Start(t, e2e.Options{})
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	tp := "00-" + traceID + "-00f067aa0ba902b7-01"
	r := post(t, fleet.Addr, "tools/call", "SchemaTest_Types", map[string]any{"name": "SchemaTest_Types",
		"arguments": map[string]any{"s": "trace"}, "_meta": map[string]any{"traceparent": tp, mcp.MetaApprover: "ana"}}, nil)
	if r.Error != nil || r.Result["isError"] == true {
		t.Fatalf("call: %+v %v", r.Error, r.Result)
	}
	if got := fleet.SchemaTest.TraceParentFor("trace"); !strings.Contains(got, traceID) {
		t.Fatalf("the worker saw traceparent %q, want trace %s", got, traceID)
	}
}

// TestClientErrors: each refusal the caller can act on has its MCP form, never
// -32603.
func TestClientErrors(t *testing.T) {
	t.Parallel()
	fleet := e2e.Start(t, e2e.Options{NATS: true, Auth: true})
	token := fleet.Token(t, "tools:call", "schematest:read")
	auth := http.Header{"Authorization": {"Bearer " + token}}
	calc := fleet.Token(t, "tools:call:calculator.*")

	call := func(name string, args map[string]any, meta map[string]any, h http.Header) rawResponse {
		p := map[string]any{"name": name, "arguments": args}
		if meta != nil {
			p["_meta"] = meta
		}
		return post(t, fleet.Addr, "tools/call", name, p, h)
	}
	// The first use of a call_id, for the conflict below.
	if r := call("Calculator_Add", map[string]any{"a": 1, "b": 2}, map[string]any{mcp.MetaCallID: "conflict-1"}, auth); r.Error != nil || r.Result["isError"] == true {
		t.Fatalf("first call: %+v %v", r.Error, r.Result)
	}
	tests := []struct {
		name    string
		tool    string
		args    map[string]any
		meta    map[string]any
		header  http.Header
		isError string // substring of the isError text; "" = want a JSON-RPC error
		code    int64
		data    string
	}{
		{name: "validation", tool: "Calculator_Add", args: map[string]any{"a": "one", "b": 2}, header: auth, isError: "invalid input"},
		{name: "approval required", tool: "SchemaTest_Types", args: map[string]any{"s": "x"}, header: auth, isError: "requires an approval"},
		{name: "conflict", tool: "Calculator_Add", args: map[string]any{"a": 5, "b": 5}, meta: map[string]any{mcp.MetaCallID: "conflict-1"}, header: auth,
			code: jsonrpc.CodeInvalidParams, data: "ALREADY_EXISTS"},
		{name: "not found", tool: "No_Such", args: map[string]any{}, header: auth, code: jsonrpc.CodeInvalidParams},
		{name: "permission denied", tool: "SchemaTest_Sleep", args: map[string]any{}, header: http.Header{"Authorization": {"Bearer " + calc}},
			code: jsonrpc.CodeInvalidParams, data: "PERMISSION_DENIED"},
	}
	for _, tt := range tests {
		r := call(tt.tool, tt.args, tt.meta, tt.header)
		if tt.isError != "" {
			content, _ := r.Result["content"].([]any)
			if r.Error != nil || r.Result["isError"] != true || len(content) == 0 ||
				!strings.Contains(content[0].(map[string]any)["text"].(string), tt.isError) {
				t.Errorf("%s: %+v %v, want an isError result saying %q", tt.name, r.Error, r.Result, tt.isError)
			}
			continue
		}
		if r.Error == nil || r.Error.Code != tt.code || !strings.Contains(string(r.Error.Data), tt.data) {
			t.Errorf("%s: %+v %v, want JSON-RPC %d with data %q", tt.name, r.Error, r.Result, tt.code, tt.data)
		}
	}
}

// TestApprovalInputRequired: a call of a tool that requires approval asks the
// client's human (input_required); an accepted answer by a caller holding
// tools:approve runs it, a declined one or one by a caller without the scope
// does not.
func TestApprovalInputRequired(t *testing.T) {
	t.Parallel()
	fleet := e2e.Start(t, e2e.Options{Auth: true})
	tests := []struct {
		name    string
		scopes  []string
		answer  *sdk.ElicitResult
		runs    bool
		message string
	}{
		{"approved", []string{"tools:call", "schematest:read", "tools:approve"}, &sdk.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}, true, ""},
		{"declined", []string{"tools:call", "schematest:read", "tools:approve"}, &sdk.ElicitResult{Action: "decline"}, false, "declined"},
		{"not ticked", []string{"tools:call", "schematest:read", "tools:approve"}, &sdk.ElicitResult{Action: "accept", Content: map[string]any{"approve": false}}, false, "declined"},
		{"caller may not approve", []string{"tools:call", "schematest:read"}, nil, false, "may not give one"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var asked atomic.Int64
			var question string
			cs := connectAt(t, "http://"+fleet.Addr+"/mcp", v2026, bearer{fleet.Token(t, tt.scopes...), http.DefaultTransport}, &sdk.ClientOptions{
				ElicitationHandler: func(_ context.Context, req *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
					asked.Add(1)
					question = req.Params.Message
					return tt.answer, nil
				}})
			s := "approve-" + strings.ReplaceAll(tt.name, " ", "-")
			before := fleet.SchemaTest.TypesFor(s)
			r, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "SchemaTest_Types", Arguments: map[string]any{"s": s}})
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tt.answer == nil && asked.Load() != 0:
				t.Fatalf("asked %d times: a caller that may not approve must not be asked", asked.Load())
			case tt.answer != nil && (asked.Load() != 1 || !strings.Contains(question, "SchemaTest.Types@") || !strings.Contains(question, s)):
				t.Fatalf("asked %d times, question %q: want one question naming the tool and its arguments", asked.Load(), question)
			}
			ran := len(fleet.SchemaTest.TypesFor(s)) > len(before)
			if ran != tt.runs || r.IsError == tt.runs {
				t.Fatalf("ran=%v isError=%v (%s), want ran=%v", ran, r.IsError, text(r), tt.runs)
			}
			if !tt.runs && !strings.Contains(text(r), tt.message) {
				t.Fatalf("isError text %q, want it to say %q", text(r), tt.message)
			}
		})
	}

	// An answer without a question, by a caller that may not approve, is
	// refused by the gateway: the tool does not run.
	r0 := post(t, fleet.Addr, "tools/call", "SchemaTest_Types", map[string]any{"name": "SchemaTest_Types", "arguments": map[string]any{"s": "unasked"},
		"inputResponses": map[string]any{mcp.ApprovalInput: map[string]any{"action": "accept", "content": map[string]any{"approve": true}}},
		"requestState":   approvalStateOf(t, fleet, map[string]any{"s": "unasked"})},
		http.Header{"Authorization": {"Bearer " + fleet.Token(t, "tools:call", "schematest:read")}})
	if content, _ := r0.Result["content"].([]any); r0.Error != nil || r0.Result["isError"] != true || len(content) == 0 ||
		!strings.Contains(content[0].(map[string]any)["text"].(string), "may not give one") || len(fleet.SchemaTest.TypesFor("unasked")) != 0 {
		t.Fatalf("an approval by a caller without tools:approve: %+v %v, want isError and no run", r0.Error, r0.Result)
	}

	// A forged answer for another call is refused before anything runs.
	r := post(t, fleet.Addr, "tools/call", "SchemaTest_Types", map[string]any{"name": "SchemaTest_Types", "arguments": map[string]any{"s": "forged"},
		"inputResponses": map[string]any{mcp.ApprovalInput: map[string]any{"action": "accept", "content": map[string]any{"approve": true}}},
		"requestState":   "approval.v1.not-this-call"},
		http.Header{"Authorization": {"Bearer " + fleet.Token(t, "tools:call", "schematest:read", "tools:approve")}})
	if r.Error == nil || r.Error.Code != jsonrpc.CodeInvalidParams || len(fleet.SchemaTest.TypesFor("forged")) != 0 {
		t.Fatalf("a mismatched requestState: %+v %v, want -32602 and no run", r.Error, r.Result)
	}
}

// TestBridgeRevisions: the stdio bridge's server (a Server over the gateway
// through sdk/client, on one stateful transport) speaks both revisions, and
// asks for an approval at both: input_required at 2026-07-28,
// elicitation/create at 2025-11-25.
func TestBridgeRevisions(t *testing.T) {
	t.Parallel()
	fleet := e2e.Start(t, e2e.Options{})
	for _, v := range []string{v2026, v2025} {
		t.Run(v, func(t *testing.T) {
			t.Parallel()
			var asked atomic.Int64
			cs := connectMemoryAt(t, fleet.Addr, v, &sdk.ClientOptions{
				ElicitationHandler: func(context.Context, *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
					asked.Add(1)
					return &sdk.ElicitResult{Action: "accept", Content: map[string]any{"approve": true, "approver": "ana"}}, nil
				}})
			if got := cs.InitializeResult().ProtocolVersion; got != v {
				t.Fatalf("negotiated %s, want %s", got, v)
			}
			if tools := listTools(t, cs); tools["Calculator_Add"] == nil {
				t.Fatal("Calculator_Add not listed")
			}
			s := "bridge-" + v
			r, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "SchemaTest_Types", Arguments: map[string]any{"s": s}})
			if err != nil || r.IsError || asked.Load() != 1 || len(fleet.SchemaTest.TypesFor(s)) != 1 {
				t.Fatalf("approved call: %+v %v (asked %d times, ran %d times)", r, err, asked.Load(), len(fleet.SchemaTest.TypesFor(s)))
			}
		})
	}
}

// connectMemoryAt is connectMemory at protocol version v.
func connectMemoryAt(t *testing.T, addr, v string, copts *sdk.ClientOptions) *sdk.ClientSession {
	t.Helper()
	c, err := client.New(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	srv := mcp.New(mcp.ClientBackend(c), mcp.Options{Logger: quiet()})
	st, ct := sdk.NewInMemoryTransports()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, st) }()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "mcp-test", Version: "1"}, copts).Connect(t.Context(), ct, &sdk.ClientSessionOptions{ProtocolVersion: v})
	if err != nil {
		cancel()
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

// approvalStateOf asks for an approval as a caller that may give one, and
// returns the requestState of the question (what a client echoes).
func approvalStateOf(t *testing.T, fleet *e2e.Fleet, args map[string]any) string {
	t.Helper()
	r := post(t, fleet.Addr, "tools/call", "SchemaTest_Types", map[string]any{"name": "SchemaTest_Types", "arguments": args,
		"_meta": map[string]any{sdk.MetaKeyClientCapabilities: map[string]any{"elicitation": map[string]any{"form": map[string]any{}}}}},
		http.Header{"Authorization": {"Bearer " + fleet.Token(t, "tools:call", "schematest:read", "tools:approve")}})
	state, _ := r.Result["requestState"].(string)
	if r.Error != nil || r.Result["resultType"] != "input_required" || state == "" {
		t.Fatalf("no input_required answer: %+v %v", r.Error, r.Result)
	}
	return state
}
