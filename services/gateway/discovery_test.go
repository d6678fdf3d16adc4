package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/gen/toolfleet/v1/toolfleetv1connect"
	"github.com/toolfleet/toolfleet/sdk/tool/contract"
	"github.com/toolfleet/toolfleet/services/gateway"
)

func discoveryFleet(t *testing.T) *gateway.Gateway {
	t.Helper()
	_, calc, _ := calculatorWorker(t, "")
	v2 := startPlainCalculator(t, 2)
	g := startGateway(t, gateway.Config{Workers: []string{calc, v2.addr, schemaTestWorker(t, "")}})
	waitTool(t, g, "Calculator.Add@1")
	waitTool(t, g, "Calculator.Add@2")
	waitTool(t, g, "SchemaTest.Types")
	return g
}

func ids(defs []*toolfleetv1.ToolDefinition) []string {
	var out []string
	for _, d := range defs {
		out = append(out, d.GetId())
	}
	return out
}

func TestListTools(t *testing.T) {
	t.Parallel()
	g := discoveryFleet(t)
	for _, r := range []struct {
		name string
		req  *toolfleetv1.ListToolsRequest
		want []string
	}{
		{"toolkit, latest only", &toolfleetv1.ListToolsRequest{Toolkit: "Calculator"}, []string{
			"Calculator.Add@2.0.0", "Calculator.Divide@2.0.0", "Calculator.Evaluate@2.0.0", "Calculator.Multiply@2.0.0", "Calculator.Subtract@2.0.0"}},
		{"glob, all versions", &toolfleetv1.ListToolsRequest{Filter: "*.Add", AllVersions: true}, []string{"Calculator.Add@1.0.0", "Calculator.Add@2.0.0"}},
		{"glob on model names", &toolfleetv1.ListToolsRequest{Filter: "SchemaTest_*"}, []string{
			"SchemaTest.CheckConstraints@0.3.1", "SchemaTest.Panic@0.3.1", "SchemaTest.Sleep@0.3.1", "SchemaTest.Types@0.3.1"}},
	} {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			resp, err := g.ListTools(r.req)
			if err != nil {
				t.Fatal(err)
			}
			if got := ids(resp.GetTools()); !slices.Equal(got, r.want) {
				t.Fatalf("got %v, want %v", got, r.want)
			}
		})
	}
	t.Run("pagination", func(t *testing.T) {
		t.Parallel()
		all, _ := g.ListTools(&toolfleetv1.ListToolsRequest{AllVersions: true})
		var paged []string
		tok := ""
		for range 20 {
			resp, err := g.ListTools(&toolfleetv1.ListToolsRequest{AllVersions: true, PageSize: 3, PageToken: tok})
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.GetTools()) > 3 {
				t.Fatalf("page of %d", len(resp.GetTools()))
			}
			paged = append(paged, ids(resp.GetTools())...)
			if tok = resp.GetNextPageToken(); tok == "" {
				break
			}
		}
		if !slices.Equal(paged, ids(all.GetTools())) || len(paged) != 14 {
			t.Fatalf("paged %v, want %v (14 tools)", paged, ids(all.GetTools()))
		}
	})
	t.Run("formats", func(t *testing.T) {
		t.Parallel()
		for f, key := range map[toolfleetv1.ToolFormat]string{
			toolfleetv1.ToolFormat_TOOL_FORMAT_OPENAI:        "function.name",
			toolfleetv1.ToolFormat_TOOL_FORMAT_OPENAI_STRICT: "function.name",
			toolfleetv1.ToolFormat_TOOL_FORMAT_ANTHROPIC:     "name",
			toolfleetv1.ToolFormat_TOOL_FORMAT_GEMINI:        "name",
			toolfleetv1.ToolFormat_TOOL_FORMAT_MCP:           "name",
		} {
			resp, err := g.ListTools(&toolfleetv1.ListToolsRequest{Filter: "Calculator.*", Format: f})
			if err != nil {
				t.Fatalf("%v: %v", f, err)
			}
			if len(resp.GetRendered()) != len(resp.GetTools()) {
				t.Fatalf("%v: %d rendered for %d tools", f, len(resp.GetRendered()), len(resp.GetTools()))
			}
			m := resp.GetRendered()[0].AsMap()
			for _, k := range strings.Split(key, ".") {
				if v, ok := m[k].(map[string]any); ok {
					m = v
				} else if m[k] != "Calculator_Add" {
					t.Fatalf("%v: %s = %v, want Calculator_Add", f, key, m[k])
				}
			}
		}
	})
}

func TestSearchTools(t *testing.T) {
	t.Parallel()
	g := discoveryFleet(t)
	for _, r := range []struct{ query, want string }{
		{"divide two numbers", "Calculator.Divide@2.0.0"},
		{"evaluate an arithmetic expression", "Calculator.Evaluate@2.0.0"},
		{"sum of numbers", "Calculator.Add@2.0.0"},
		{"wait sleep", "SchemaTest.Sleep@0.3.1"},
	} {
		t.Run(r.query, func(t *testing.T) {
			t.Parallel()
			resp, err := g.SearchTools(&toolfleetv1.SearchToolsRequest{Query: r.query, Limit: 3, Format: toolfleetv1.ToolFormat_TOOL_FORMAT_ANTHROPIC})
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.GetResults()) == 0 || resp.GetResults()[0].GetTool().GetId() != r.want {
				t.Fatalf("results %v, want %s first", resp.GetResults(), r.want)
			}
			if resp.GetResults()[0].GetRendered().AsMap()["name"] != strings.ReplaceAll(strings.Split(r.want, "@")[0], ".", "_") {
				t.Fatalf("rendered %v", resp.GetResults()[0].GetRendered())
			}
		})
	}
}

// TestCallTools: outcomes in request order; failures before the tool ran are
// per-call failures, not an error of the whole request.
func TestCallTools(t *testing.T) {
	t.Parallel()
	g := discoveryFleet(t)
	ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+token(t, "tools:call"))
	resp, err := grpcClient(t, g.Addr()).CallTools(ctx, &toolfleetv1.CallToolsRequest{Calls: []*toolfleetv1.CallToolRequest{
		{ToolId: "Calculator.Add@1", Input: addInput(1, 2)},
		{ToolId: "Nope.Tool", CallId: "c2"},
		{ToolId: "Calculator.Multiply@1", Input: addInput(3, 4)},
		{ToolId: "Calculator.Add@1", Input: mustStruct(t, map[string]any{"z": 1})},
		{ToolId: "SchemaTest.Panic", Input: mustStruct(t, map[string]any{})},
	}})
	if err != nil {
		t.Fatal(err)
	}
	o := resp.GetOutcomes()
	if len(o) != 5 {
		t.Fatalf("%d outcomes", len(o))
	}
	if o[0].GetResponse().GetValue().GetStructValue().GetFields()["result"].GetNumberValue() != 3 ||
		o[1].GetFailure().GetCode() != "NOT_FOUND" || o[1].GetFailure().GetCallId() != "c2" ||
		o[2].GetResponse().GetValue().GetStructValue().GetFields()["result"].GetNumberValue() != 12 ||
		o[3].GetFailure().GetValidationError() == nil ||
		!o[4].GetResponse().GetSuccess() {
		t.Fatalf("outcomes: %v", o)
	}
}

// TestOnePort: health, reflection, Connect, gRPC-Web-capable HTTP/2, OXP and
// metrics all answer on the gateway's one port.
func TestOnePort(t *testing.T) {
	t.Parallel()
	g := discoveryFleet(t)
	cc, err := grpc.NewClient(g.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	h, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("grpc health: %v %v", h, err)
	}
	c, err := contract.Fetch(ctx, cc)
	if err != nil {
		t.Fatalf("reflection: %v", err)
	}
	if len(c.Services) != 1 || c.Services[0].FullName() != "toolfleet.v1.ToolGatewayService" {
		t.Fatalf("reflection lists %v", c.Services)
	}
	// Connect over HTTP/2 (h2c) and gRPC-Web; discovery needs a valid token.
	bearer := "Bearer " + token(t)
	for _, opt := range []connect.ClientOption{connect.WithProtoJSON(), connect.WithGRPCWeb()} {
		cl := toolfleetv1connect.NewToolGatewayServiceClient(h2c(), "http://"+g.Addr(), opt)
		req := connect.NewRequest(&toolfleetv1.GetToolRequest{ToolId: "Calculator_Divide@1"})
		if _, err := cl.GetTool(ctx, req); connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Fatalf("GetTool without a token: %v, want Unauthenticated", err)
		}
		req.Header().Set("Authorization", bearer)
		resp, err := cl.GetTool(ctx, req)
		if err != nil || resp.Msg.GetTool().GetId() != "Calculator.Divide@1.0.0" {
			t.Fatalf("GetTool: %v %v", resp, err)
		}
	}
	get := func(path, authorization string) (int, string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+g.Addr()+path, nil)
		if authorization != "" {
			req.Header.Set("Authorization", authorization)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/health", ""); code != 200 || !strings.Contains(body, `"healthy"`) {
		t.Fatalf("/health: %d %s", code, body)
	}
	if code, _ := get("/tools", ""); code != http.StatusUnauthorized {
		t.Fatalf("/tools without a token: %d, want 401", code)
	}
	// A token without a call scope lists nothing; tools:call lists the calculator.
	if code, body := get("/tools?toolkit=Calculator", bearer); code != 200 || !strings.Contains(body, `"items":[]`) {
		t.Fatalf("/tools with a token that may call nothing: %d %s, want an empty list", code, body)
	}
	code, body := get("/tools?toolkit=Calculator&all_versions=true&page_size=2", "Bearer "+token(t, "tools:call"))
	var list struct {
		Items []map[string]any `json:"items"`
		Next  string           `json:"next_page_token"`
	}
	if err := json.Unmarshal([]byte(body), &list); code != 200 || err != nil || len(list.Items) != 2 || list.Next == "" || list.Items[0]["model_name"] != "Calculator_Add" {
		t.Fatalf("/tools: %d %s", code, body)
	}
	callGRPC(t, g.Addr(), "Calculator.Add@1", map[string]any{"a": 1, "b": 2}, token(t, "tools:call"))
	if code, body := get("/metrics", ""); code != 200 || !strings.Contains(body, `toolfleet_gateway_calls_total{outcome="success",tool="Add",toolkit="Calculator",version="1.0.0"}`) {
		t.Fatalf("/metrics: %d %s", code, body)
	}
}

// TestCallToolsScheduling: calls of read-only tools run in parallel (two of them
// meet inside the worker), calls of side-effecting tools run one at a time in the
// given order.
func TestCallToolsScheduling(t *testing.T) {
	t.Parallel()
	ro := startPlainCalculator(t, 2)
	fx := startPlainCalculator(t, 3, withSideEffects())
	g := startGateway(t, gateway.Config{Workers: []string{ro.addr, fx.addr}})
	waitTool(t, g, "Calculator.Add@2")
	waitTool(t, g, "Calculator.Add@3")
	p := &gateway.Principal{Anonymous: true}

	t.Run("read-only in parallel", func(t *testing.T) {
		met := make(chan struct{})
		var once sync.Once
		hook := func(a float64) error {
			if a == 2 {
				once.Do(func() { close(met) }) // the second call arrived
				return nil
			}
			select {
			case <-met: // the first call waits for the second: only parallel calls meet
				return nil
			case <-time.After(10 * time.Second):
				return errors.New("the calls ran one after another")
			}
		}
		ro.onAdd.Store(&hook)
		out := g.CallMany(t.Context(), p, []*toolfleetv1.CallToolRequest{
			{ToolId: "Calculator.Add@2", Input: addInput(1, 0)},
			{ToolId: "Calculator.Add@2", Input: addInput(2, 0)},
		})
		for i, o := range out {
			if !o.GetResponse().GetSuccess() {
				t.Fatalf("call %d: %v", i, o)
			}
		}
	})
	t.Run("side effects in order", func(t *testing.T) {
		var mu sync.Mutex
		var order []float64
		inFlight := atomic.Int32{}
		hook := func(a float64) error {
			if inFlight.Add(1) > 1 {
				return errors.New("two side-effecting calls at once")
			}
			defer inFlight.Add(-1)
			mu.Lock()
			order = append(order, a)
			mu.Unlock()
			time.Sleep(5 * time.Millisecond) // widen the window an overlap would need
			return nil
		}
		fx.onAdd.Store(&hook)
		var reqs []*toolfleetv1.CallToolRequest
		for i := 1; i <= 5; i++ {
			reqs = append(reqs, &toolfleetv1.CallToolRequest{ToolId: "Calculator.Add@3", Input: addInput(float64(i), 0)})
		}
		for i, o := range g.CallMany(t.Context(), p, reqs) {
			if !o.GetResponse().GetSuccess() {
				t.Fatalf("call %d: %v", i, o)
			}
		}
		if !slices.Equal(order, []float64{1, 2, 3, 4, 5}) {
			t.Fatalf("order %v, want 1..5", order)
		}
	})
}
