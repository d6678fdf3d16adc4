package gateway_test

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/gen/toolfleet/v1/toolfleetv1connect"
	"github.com/toolfleet/toolfleet/services/gateway"
)

// boundedGateway starts a gateway with auth off on loopback (as toolfleet dev
// runs it) in front of a counting calculator.
func boundedGateway(t *testing.T, cfg gateway.Config) (*gateway.Gateway, *countingCalculator) {
	t.Helper()
	calc, addr, _ := calculatorWorker(t, "")
	cfg.Workers = []string{addr}
	cfg.Auth.Disabled = true
	g := startGateway(t, cfg)
	waitTool(t, g, "Calculator.Add")
	return g, calc
}

// binaryConnect is a connect-go client with the binary protobuf codec.
func binaryConnect(addr string, opts ...connect.ClientOption) toolfleetv1connect.ToolGatewayServiceClient {
	return toolfleetv1connect.NewToolGatewayServiceClient(http.DefaultClient, "http://"+addr, opts...)
}

const addBody = `{"request":{"tool_id":"Calculator.Add","input":{"a":1,"b":2}}}`

// TestBrowserRequestsRefused: what a web page in the developer's browser can
// send to a gateway on loopback is refused, and nothing runs.
func TestBrowserRequestsRefused(t *testing.T) {
	t.Parallel()
	g, calc := boundedGateway(t, gateway.Config{})
	base := "http://" + g.Addr()
	tests := []struct {
		name, path, body string
		header           map[string]string
		host             string
		want             int
	}{
		{name: "cross-site text/plain form post", path: "/tools/call", body: addBody,
			header: map[string]string{"Content-Type": "text/plain", "Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}, want: http.StatusForbidden},
		{name: "cross-origin without fetch metadata", path: "/tools/call", body: addBody,
			header: map[string]string{"Content-Type": "application/json", "Origin": "http://evil.example"}, want: http.StatusForbidden},
		{name: "text/plain without an origin", path: "/tools/call", body: addBody,
			header: map[string]string{"Content-Type": "text/plain"}, want: http.StatusUnsupportedMediaType},
		{name: "DNS-rebound host", path: "/tools/call", body: addBody, host: "evil.example:8080",
			header: map[string]string{"Content-Type": "application/json", "Origin": "http://evil.example:8080"}, want: http.StatusForbidden},
		{name: "cross-site Connect call", path: "/toolfleet.v1.ToolGatewayService/CallTool", body: `{"toolId":"Calculator.Add","input":{"a":1,"b":2}}`,
			header: map[string]string{"Content-Type": "application/json", "Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}, want: http.StatusForbidden},
		{name: "mcp from a foreign origin", path: "/mcp", body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"Calculator_Add","arguments":{"a":1,"b":2}}}`,
			header: map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream", "Origin": "http://evil.example"}, want: http.StatusForbidden},
		{name: "mcp GET from a foreign origin", path: "/mcp",
			header: map[string]string{"Accept": "text/event-stream", "Origin": "http://evil.example"}, want: http.StatusForbidden},
	}
	for _, tt := range tests {
		method := http.MethodPost
		if tt.body == "" {
			method = http.MethodGet
		}
		req, err := http.NewRequestWithContext(t.Context(), method, base+tt.path, strings.NewReader(tt.body))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range tt.header {
			req.Header.Set(k, v)
		}
		if tt.host != "" {
			req.Host = tt.host
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Errorf("%s: status %d, want %d", tt.name, resp.StatusCode, tt.want)
		}
	}
	if n := calc.adds.Load(); n != 0 {
		t.Fatalf("refused requests ran Calculator.Add %d times", n)
	}

	// The same call from the gateway's own origin, and from a plain client, runs.
	for _, origin := range []string{"", base} {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/tools/call", strings.NewReader(addBody))
		req.Header.Set("Content-Type", "application/json")
		if origin != "" {
			req.Header.Set("Origin", origin)
			req.Header.Set("Sec-Fetch-Site", "same-origin")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("origin %q: status %d, want 200", origin, resp.StatusCode)
		}
	}
	if n := calc.adds.Load(); n != 2 {
		t.Fatalf("allowed requests ran Calculator.Add %d times, want 2", n)
	}
}

// TestAllowedOrigin: an origin the operator trusts may call.
func TestAllowedOrigin(t *testing.T) {
	t.Parallel()
	g, calc := boundedGateway(t, gateway.Config{AllowedOrigins: []string{"https://console.example.com"}})
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+g.Addr()+"/tools/call", strings.NewReader(addBody))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Origin", "https://console.example.com")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || calc.adds.Load() != 1 {
		t.Fatalf("status %d, adds %d; want 200 and 1", resp.StatusCode, calc.adds.Load())
	}
}

// bigInput is a CallTool input whose encoding is over size bytes.
func bigInput(size int) *structpb.Struct {
	return &structpb.Struct{Fields: map[string]*structpb.Value{
		"a": structpb.NewNumberValue(1), "b": structpb.NewNumberValue(2),
		"pad": structpb.NewStringValue(strings.Repeat("x", size)),
	}}
}

// TestOversizedRequestsRefused: an 8 MiB request is refused on every surface
// before it is decoded, and nothing runs.
func TestOversizedRequestsRefused(t *testing.T) {
	t.Parallel()
	g, calc := boundedGateway(t, gateway.Config{})
	addr := g.Addr()
	const size = 8 << 20
	req := &toolfleetv1.CallToolRequest{ToolId: "Calculator.Add", Input: bigInput(size)}

	_, err := grpcClient(t, addr).CallTool(t.Context(), req)
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("gRPC: %v, want ResourceExhausted", err)
	}
	for name, c := range map[string]toolfleetv1connect.ToolGatewayServiceClient{
		"connect-json": connectClient(addr), "connect-proto": binaryConnect(addr), "grpc-web": binaryConnect(addr, connect.WithGRPCWeb())} {
		_, err := c.CallTool(t.Context(), connect.NewRequest(req))
		if connect.CodeOf(err) != connect.CodeResourceExhausted {
			t.Errorf("%s: %v, want ResourceExhausted", name, err)
		}
	}
	big := `{"request":{"tool_id":"Calculator.Add","input":{"a":1,"b":2,"pad":"` + strings.Repeat("x", size) + `"}}}`
	resp, err := http.Post("http://"+addr+"/tools/call", "application/json", strings.NewReader(big))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("OXP: status %d, want 413", resp.StatusCode)
	}
	mcpBig := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{"pad":"` + strings.Repeat("x", size) + `"}}}`
	resp, err = http.Post("http://"+addr+"/mcp", "application/json", strings.NewReader(mcpBig))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("MCP: status %d, want 413", resp.StatusCode)
	}

	// Within the byte limit, but 200,000 JSON values: refused before decoding.
	zeros := "[" + strings.Repeat("0,", 200_000) + "0]"
	_, err = connectClient(addr).CallTool(t.Context(), connect.NewRequest(&toolfleetv1.CallToolRequest{ToolId: "Calculator.Add",
		Input: mustStruct(t, map[string]any{"a": 1, "b": 2, "pad": manyZeros(200_000)})}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "JSON values") {
		t.Errorf("Connect JSON with 200,000 values: %v, want InvalidArgument naming the limit", err)
	}
	for path, body := range map[string]string{
		"/tools/call": `{"request":{"tool_id":"Calculator.Add","input":{"a":1,"b":2,"pad":` + zeros + `}}}`,
		"/mcp":        `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{"pad":` + zeros + `}}}`,
	} {
		resp, err := http.Post("http://"+addr+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Errorf("%s with 200,000 values: status %d, want 413", path, resp.StatusCode)
		}
	}
	if n := calc.adds.Load(); n != 0 {
		t.Fatalf("oversized requests ran Calculator.Add %d times", n)
	}
}

func manyZeros(n int) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = 0
	}
	return out
}

// TestBatchBounds: a batch over the cap is refused whole; one within it runs
// every call, however small the parallelism.
func TestBatchBounds(t *testing.T) {
	t.Parallel()
	g, calc := boundedGateway(t, gateway.Config{MaxBatchCalls: 50, BatchParallelism: 3})
	batch := func(n int) *toolfleetv1.CallToolsRequest {
		req := &toolfleetv1.CallToolsRequest{}
		for range n {
			req.Calls = append(req.Calls, &toolfleetv1.CallToolRequest{ToolId: "Calculator.Add", Input: &structpb.Struct{Fields: map[string]*structpb.Value{
				"a": structpb.NewNumberValue(1), "b": structpb.NewNumberValue(2)}}})
		}
		return req
	}
	_, err := grpcClient(t, g.Addr()).CallTools(t.Context(), batch(10000))
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "at most 50 calls") {
		t.Fatalf("10,000-call batch: %v, want InvalidArgument naming the cap", err)
	}
	if n := calc.adds.Load(); n != 0 {
		t.Fatalf("a refused batch ran %d calls", n)
	}
	resp, err := grpcClient(t, g.Addr()).CallTools(t.Context(), batch(50))
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range resp.GetOutcomes() {
		if !o.GetResponse().GetSuccess() {
			t.Errorf("call %d: %v", i, o)
		}
	}
	if n := calc.adds.Load(); n != 50 {
		t.Fatalf("ran %d calls, want 50", n)
	}
}

// TestMalformedJSONRPC: a message MCP cannot act on gets a JSON-RPC error,
// never a 202 with the call dropped.
func TestMalformedJSONRPC(t *testing.T) {
	t.Parallel()
	g, calc := boundedGateway(t, gateway.Config{})
	tests := []struct{ name, body string }{
		{"upper-case method key", `{"jsonrpc":"2.0","id":1,"METHOD":"tools/call","params":{"name":"Calculator_Add"}}`},
		{"no version", `{"id":1,"method":"tools/list"}`},
		{"not JSON", `{"jsonrpc":`},
		{"result and error", `{"jsonrpc":"2.0","id":1,"result":{},"error":{"code":1,"message":"x"}}`},
		{"empty batch", `[]`},
		{"a string", `"tools/call"`},
	}
	for _, tt := range tests {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+g.Addr()+"/mcp", strings.NewReader(tt.body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		var msg struct {
			JSONRPC string `json:"jsonrpc"`
			Error   *struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if resp.StatusCode != http.StatusBadRequest || json.Unmarshal(bytes.TrimSpace(b), &msg) != nil || msg.Error == nil || msg.JSONRPC != "2.0" {
			t.Errorf("%s: %d %s, want 400 with a JSON-RPC error", tt.name, resp.StatusCode, b)
		}
	}
	if n := calc.adds.Load(); n != 0 {
		t.Fatalf("malformed messages ran %d calls", n)
	}
}

// TestInputOutsideJSON: NaN, ±Inf and an empty Value are validation errors
// naming the field on every protocol (not Internal), a string is not a number,
// and nothing runs.
func TestInputOutsideJSON(t *testing.T) {
	t.Parallel()
	g, calc := boundedGateway(t, gateway.Config{})
	addr := g.Addr()
	inputs := map[string]*structpb.Value{
		"NaN": structpb.NewNumberValue(math.NaN()), "+Inf": structpb.NewNumberValue(math.Inf(1)),
		"-Inf": structpb.NewNumberValue(math.Inf(-1)), "empty": {},
	}
	for name, a := range inputs {
		req := &toolfleetv1.CallToolRequest{ToolId: "Calculator.Add", Input: &structpb.Struct{Fields: map[string]*structpb.Value{
			"a": a, "b": structpb.NewNumberValue(2)}}}
		_, err := grpcClient(t, addr).CallTool(t.Context(), req)
		st := status.Convert(err)
		var ve *toolfleetv1.ValidationError
		for _, d := range st.Details() {
			if v, ok := d.(*toolfleetv1.ValidationError); ok {
				ve = v
			}
		}
		if st.Code() != codes.InvalidArgument || ve.GetParameterErrors()["a"] == "" {
			t.Errorf("gRPC %s: %v, want InvalidArgument with a validation error on a", name, err)
		}
		_, err = binaryConnect(addr, connect.WithGRPCWeb()).CallTool(t.Context(), connect.NewRequest(req))
		if connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("gRPC-Web %s: %v, want InvalidArgument", name, err)
		}
	}
	resp, err := http.Post("http://"+addr+"/tools/call", "application/json",
		strings.NewReader(`{"request":{"tool_id":"Calculator.Add","input":{"a":"1","b":2}}}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(string(b), `"a":"must be a number, not a string"`) {
		t.Errorf("OXP string for a number: %d %s, want 422 naming a", resp.StatusCode, b)
	}
	if n := calc.adds.Load(); n != 0 {
		t.Fatalf("invalid inputs ran Calculator.Add %d times", n)
	}
}
