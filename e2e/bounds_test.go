package e2e_test

import (
	"net/http"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolfleet/toolfleet/e2e"
	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	jsonqv1 "github.com/toolfleet/toolfleet/gen/tools/jsonq/v1"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/sdk/tool/tooltest"
	"github.com/toolfleet/toolfleet/workers/jsonq/jsonq"
)

// TestFleetSurvivesAbuse, on the embedded stack (NATS, gateway, workers): the
// jq stack bomb of issue 10 ends as an execution error and every part of the
// fleet keeps serving; a cross-origin POST from a web page is refused with
// nothing run.
func TestFleetSurvivesAbuse(t *testing.T) {
	t.Parallel()
	fleet := e2e.Start(t, e2e.Options{NATS: true})
	fleet.AddWorker(t, func(w *tool.Worker) { jsonqv1.RegisterJSONQueryServiceServer(w, jsonq.New(jsonq.Config{})) })
	fleet.WaitTool(t, "JSONQuery.Query")
	c := toolfleetv1.NewToolGatewayServiceClient(tooltest.Dial(t, fleet.Addr))

	// The bomb builds its path to 4,194,304 elements; here it stops at
	// 4,096, past the worker's path bound, so the refusal is the same but costs
	// no CPU: under -race on two busy cores the full doubling alone could outrun
	// the tool's 3 s timeout. The full-size bombs run in workers/jsonq's
	// TestQueryBombs, with no deadline between them and the answer.
	bomb := `[0] | until(length >= 4096; . + .) | . as $p | null | setpath($p; 1) | length`
	resp, err := c.CallTool(t.Context(), &toolfleetv1.CallToolRequest{ToolId: "JSONQuery.Query", Input: &structpb.Struct{Fields: map[string]*structpb.Value{
		"query": structpb.NewStringValue(bomb), "documentJson": structpb.NewStringValue("null")}}})
	if err != nil || resp.GetSuccess() || resp.GetError().GetMessage() == "" {
		t.Fatalf("jq stack bomb: %v, %v; want an execution error", resp, err)
	}
	// Issue 32's string bombs: one builtin building a huge string from
	// operands under the value bound is refused before it runs, and the
	// answer is an execution error, not a 504 while the worker computes.
	for _, q := range []string{`("x"*10000000) as $s | [range(100) | $s] | @base64`, `("," * 10000000) | [splits(",")] | length`, `error("x" * 10000000)`} {
		resp, err := c.CallTool(t.Context(), &toolfleetv1.CallToolRequest{ToolId: "JSONQuery.Query", Input: &structpb.Struct{Fields: map[string]*structpb.Value{
			"query": structpb.NewStringValue(q), "documentJson": structpb.NewStringValue("null")}}})
		if err != nil || resp.GetSuccess() || resp.GetError().GetMessage() == "" || len(resp.GetError().GetMessage()) > 2*jsonq.MaxErrorBytes {
			t.Fatalf("jq string bomb %s: %v, %.300v; want a short execution error", q, err, resp)
		}
	}
	// Still up: the jq worker, another worker, and the gateway. The test's workers
	// announce every 100 ms, so on two busy cores the bomb's seconds of CPU can let
	// the jq worker's registration lapse for a moment; waiting for it to announce
	// again is itself the proof that the process lived.
	fleet.WaitTool(t, "JSONQuery.Query")
	resp, err = c.CallTool(t.Context(), &toolfleetv1.CallToolRequest{ToolId: "JSONQuery.Query", Input: &structpb.Struct{Fields: map[string]*structpb.Value{
		"query": structpb.NewStringValue(".a"), "documentJson": structpb.NewStringValue(`{"a": 1}`)}}})
	if err != nil || !resp.GetSuccess() {
		t.Fatalf("a query after the bomb: %v, %v", resp, err)
	}
	before := fleet.Calculator.Adds.Load()
	resp, err = c.CallTool(t.Context(), &toolfleetv1.CallToolRequest{ToolId: "Calculator.Add", Input: &structpb.Struct{Fields: map[string]*structpb.Value{
		"a": structpb.NewNumberValue(1), "b": structpb.NewNumberValue(2)}}})
	if err != nil || !resp.GetSuccess() || fleet.Calculator.Adds.Load() != before+1 {
		t.Fatalf("Calculator.Add after the bomb: %v, %v", resp, err)
	}

	// A web page's simple cross-origin POST (no preflight) is refused, nothing runs.
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+fleet.Addr+"/tools/call",
		strings.NewReader(`{"request":{"tool_id":"Calculator.Add","input":{"a":1,"b":2}}}`))
	req.Header.Set("Content-Type", "text/plain")
	req.Header.Set("Origin", "http://evil.example")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = r.Body.Close()
	if r.StatusCode != http.StatusForbidden || fleet.Calculator.Adds.Load() != before+1 {
		t.Fatalf("cross-origin POST: status %d, adds %d; want 403 and nothing run", r.StatusCode, fleet.Calculator.Adds.Load()-before-1)
	}
}
