package e2e_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolfleet/toolfleet/e2e"
	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	conformancev1 "github.com/toolfleet/toolfleet/gen/tools/conformance/v1"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/sdk/tool/tooltest"
	"github.com/toolfleet/toolfleet/workers/conformance/conformance"
)

// TestToolLogsReachTheCaller: the lines a tool logs for its caller
// (tool.CallerLogger) come back with the result on every surface — gRPC
// (CallToolResponse.logs), OXP HTTP ("logs") and MCP (notifications/message
// before the result, at the client's level).
func TestToolLogsReachTheCaller(t *testing.T) {
	t.Parallel()
	fleet := e2e.Start(t, e2e.Options{NATS: true})
	fleet.AddWorker(t, func(w *tool.Worker) { conformancev1.RegisterConformanceServiceServer(w, conformance.New()) })
	fleet.WaitTool(t, "Conformance.WithLogging")
	want := []string{"Tool execution started", "Tool processing data", "Tool execution completed"}

	// gRPC.
	c := toolfleetv1.NewToolGatewayServiceClient(tooltest.Dial(t, fleet.Addr))
	resp, err := c.CallTool(t.Context(), &toolfleetv1.CallToolRequest{ToolId: "Conformance.WithLogging", Input: &structpb.Struct{}})
	if err != nil || !resp.GetSuccess() {
		t.Fatalf("gRPC: %v %v", resp, err)
	}
	var got []string
	for _, l := range resp.GetLogs() {
		if l.GetLevel() != toolfleetv1.ToolLogLevel_TOOL_LOG_LEVEL_INFO {
			t.Errorf("gRPC: %q at %v, want INFO", l.GetMessage(), l.GetLevel())
		}
		got = append(got, l.GetMessage())
	}
	if !slices.Equal(got, want) {
		t.Fatalf("gRPC logs %q, want %q", got, want)
	}

	// OXP HTTP.
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+fleet.Addr+"/tools/call",
		strings.NewReader(`{"request":{"tool_id":"Conformance.WithLogging","input":{}}}`))
	req.Header.Set("Content-Type", "application/json")
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(r.Body)
	_ = r.Body.Close()
	var oxp struct {
		Result struct {
			Logs []struct{ Level, Message string } `json:"logs"`
		} `json:"result"`
	}
	if err := json.Unmarshal(body, &oxp); err != nil || len(oxp.Result.Logs) != 3 || oxp.Result.Logs[0].Message != want[0] || oxp.Result.Logs[0].Level != "TOOL_LOG_LEVEL_INFO" {
		t.Fatalf("OXP: HTTP %d %s (%v)", r.StatusCode, body, err)
	}

	// MCP (the SDK client speaks 2026-07-28): calls without a log level and at
	// "warning" get no notifications; one at "info" gets the three, on the
	// call's stream before its result. The SDK client hands notifications to
	// its handler asynchronously, so the test waits for them, and a
	// notification of the first two calls would show up among them.
	var mu sync.Mutex
	var notes []string
	client := sdk.NewClient(&sdk.Implementation{Name: "logs-test", Version: "1"}, &sdk.ClientOptions{
		LoggingMessageHandler: func(_ context.Context, r *sdk.LoggingMessageRequest) {
			mu.Lock()
			defer mu.Unlock()
			if s, ok := r.Params.Data.(string); ok && r.Params.Logger == "Conformance.WithLogging@1.0.0" {
				notes = append(notes, string(r.Params.Level)+": "+s)
			}
		}})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cs, err := client.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: "http://" + fleet.Addr + "/mcp", MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	for _, level := range []string{"", "warning", "info"} {
		params := &sdk.CallToolParams{Name: "test_tool_with_logging", Arguments: map[string]any{}}
		if level != "" {
			params.Meta = sdk.Meta{sdk.MetaKeyLogLevel: level}
		}
		res, err := cs.CallTool(ctx, params)
		if err != nil || res.IsError {
			t.Fatalf("MCP at level %q: %v %v", level, res, err)
		}
	}
	var wantNotes []string
	for _, w := range want {
		wantNotes = append(wantNotes, "info: "+w)
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		mu.Lock()
		n := len(notes)
		mu.Unlock()
		if n >= len(wantNotes) {
			break
		}
	}
	time.Sleep(200 * time.Millisecond) // a stray notification would arrive by now
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(notes, wantNotes) {
		t.Fatalf("MCP notifications %q, want %q (only the call at level info)", notes, wantNotes)
	}
}
