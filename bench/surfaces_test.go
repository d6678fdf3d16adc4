package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/gen/toolfleet/v1/toolfleetv1connect"
	calculatorv1 "github.com/toolfleet/toolfleet/gen/tools/calculator/v1"
	"github.com/toolfleet/toolfleet/internal/natsx/natstest"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/sdk/tool/tooltest"
	"github.com/toolfleet/toolfleet/services/gateway"
	"github.com/toolfleet/toolfleet/workers/calculator/calculator"
)

// BenchmarkSurfaces calls Calculator.Add through the full gateway (auth,
// validation, events on NATS, no caller call_id) on each of its surfaces —
// gRPC (the baseline), Connect with JSON, OXP HTTP and MCP — and calls the same
// tool on a plain MCP server of the official Go SDK in the same process, which
// does no auth, validation or events: the floor of any MCP server. It reports
// each surface's throughput against gRPC, and MCP through the gateway against
// the plain MCP server.
//
//	go test ./bench -run '^$' -bench Surfaces -benchtime 3000x
func BenchmarkSurfaces(b *testing.B) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	nats := natstest.Start(b)
	w, _ := tooltest.Start(b, tool.Config{Name: "calculator"}, func(w *tool.Worker) {
		calculatorv1.RegisterCalculatorServiceServer(w, calculator.New())
	})
	secret := []byte("bench-secret-bench-secret-bench-secret")
	g := startBenchGateway(b, gateway.Config{Workers: []string{w.Addr()}, NATSURL: nats.URL(), Logger: quiet}, secret)
	tok := benchToken(b, secret)
	base := "http://" + g.Addr()
	// One pool of HTTP/1.1 connections per HTTP surface, as many as callers.
	httpClient := &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 128}}
	bearer := &bearerTransport{token: tok, next: httpClient.Transport}

	grpcClient := toolfleetv1.NewToolGatewayServiceClient(tooltest.Dial(b, g.Addr()))
	authCtx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+tok)
	input, _ := structpb.NewStruct(map[string]any{"a": 2, "b": 3})
	connectClient := toolfleetv1connect.NewToolGatewayServiceClient(httpClient, base, connect.WithProtoJSON())
	oxpBody := []byte(`{"request": {"tool_id": "Calculator.Add", "input": {"a": 2, "b": 3}}}`)
	gatewayMCP := mcpSession(b, base+"/mcp", &http.Client{Timeout: time.Minute, Transport: bearer})
	plainMCP := mcpSession(b, startPlainMCP(b), httpClient)
	mcpArgs := map[string]any{"a": 2, "b": 3}

	sides := []side{
		{name: "grpc", call: func() error {
			resp, err := grpcClient.CallTool(authCtx, &toolfleetv1.CallToolRequest{ToolId: "Calculator.Add", Input: input})
			return succeeded(resp, err)
		}},
		{name: "connect-json", call: func() error {
			req := connect.NewRequest(&toolfleetv1.CallToolRequest{ToolId: "Calculator.Add", Input: input})
			req.Header().Set("Authorization", "Bearer "+tok)
			resp, err := connectClient.CallTool(context.Background(), req)
			if err != nil {
				return err
			}
			return succeeded(resp.Msg, nil)
		}},
		{name: "oxp-http", call: func() error {
			req, _ := http.NewRequest(http.MethodPost, base+"/tools/call", bytes.NewReader(oxpBody))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+tok)
			resp, err := httpClient.Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err == nil && (resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte(`"success":true`))) {
				err = fmt.Errorf("OXP %d: %s", resp.StatusCode, body)
			}
			return err
		}},
		{name: "mcp-gateway", call: func() error { return mcpCall(gatewayMCP, mcpArgs) }},
		{name: "mcp-plain", call: func() error { return mcpCall(plainMCP, mcpArgs) }},
	}
	for _, conc := range []int{1, 64} {
		b.Run(fmt.Sprintf("callers=%d", conc), func(b *testing.B) {
			res := measure(b, conc, b.N, sides)
			grpc := res[0]
			for _, r := range res[1:] {
				b.ReportMetric(r.tput/grpc.tput, r.name+"÷grpc")
			}
			b.ReportMetric(res[3].tput/res[4].tput, "mcp-gateway÷mcp-plain")
			b.ReportMetric(grpc.tput, "grpc-calls/s")
			for _, r := range res {
				b.Logf("callers=%d n=%d %-13s %8.0f calls/s (%.2f× gRPC) p50=%-10s p99=%-10s cpu/call=%-9s allocs/call=%d",
					conc, b.N, r.name, r.tput, r.tput/grpc.tput, r.p(0.5), r.p(0.99), r.cpu.Round(time.Microsecond), r.mem)
			}
		})
	}
}

// succeeded is err, or an error when the call did not succeed.
func succeeded(resp *toolfleetv1.CallToolResponse, err error) error {
	if err == nil && !resp.GetSuccess() {
		err = fmt.Errorf("call failed: %v", resp.GetError())
	}
	return err
}

// bearerTransport adds a bearer token to every request.
type bearerTransport struct {
	token string
	next  http.RoundTripper
}

func (t *bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+t.token)
	return t.next.RoundTrip(r)
}

// mcpSession opens an MCP session with the official Go SDK's client over
// streamable HTTP; it is closed when the benchmark ends.
func mcpSession(b *testing.B, endpoint string, hc *http.Client) *sdk.ClientSession {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := sdk.NewClient(&sdk.Implementation{Name: "bench", Version: "1"}, nil)
	cs, err := c.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: endpoint, HTTPClient: hc, MaxRetries: -1}, nil)
	if err != nil {
		b.Fatalf("MCP session with %s: %v", endpoint, err)
	}
	b.Cleanup(func() { _ = cs.Close() })
	return cs
}

// mcpCall calls Calculator_Add and checks its result is 5.
func mcpCall(cs *sdk.ClientSession, args map[string]any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "Calculator_Add", Arguments: args})
	if err != nil {
		return err
	}
	if r.IsError {
		return errors.New("MCP call failed")
	}
	out, ok := r.StructuredContent.(map[string]any)
	if !ok || out["result"] != 5.0 {
		return fmt.Errorf("MCP result %v", r.StructuredContent)
	}
	return nil
}

// addArgs and addResult are the plain MCP server's Calculator_Add contract.
type addArgs struct {
	A float64 `json:"a"`
	B float64 `json:"b"`
}

type addResult struct {
	Result float64 `json:"result"`
}

// startPlainMCP serves Calculator_Add with the official Go SDK's server over
// streamable HTTP on loopback, and returns its endpoint.
func startPlainMCP(b *testing.B) string {
	b.Helper()
	srv := sdk.NewServer(&sdk.Implementation{Name: "plain", Version: "1"}, nil)
	sdk.AddTool(srv, &sdk.Tool{Name: "Calculator_Add", Description: "a + b"},
		func(_ context.Context, _ *sdk.CallToolRequest, in addArgs) (*sdk.CallToolResult, addResult, error) {
			return nil, addResult{Result: in.A + in.B}, nil
		})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	hs := &http.Server{Handler: sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil),
		ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() { defer close(done); _ = hs.Serve(lis) }()
	b.Cleanup(func() { _ = hs.Close(); <-done })
	return "http://" + lis.Addr().String()
}
