package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/internal/natsx/natstest"
	"github.com/toolfleet/toolfleet/services/gateway"
	"github.com/toolfleet/toolfleet/services/gateway/mcp"
)

// bearerTransport adds an Authorization header to every request.
type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// enumLists collects every "enum" list in a rendered tool declaration.
func enumLists(v any, into *[][]any) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if l, ok := e.([]any); ok && k == "enum" {
				*into = append(*into, l)
				continue
			}
			enumLists(e, into)
		}
	case []any:
		for _, e := range x {
			enumLists(e, into)
		}
	}
}

// TestEnumModelNamesOnEverySurface: SchemaTest.Types' Color enum is offered
// as red/green (never COLOR_UNSPECIFIED) in every tool format, taken by model
// or proto name on gRPC, Connect, OXP HTTP and MCP, and echoed back with model
// names on all of them.
func TestEnumModelNamesOnEverySurface(t *testing.T) {
	t.Parallel()
	g := startGateway(t, gateway.Config{Workers: []string{schemaTestWorker(t, "")}})
	waitTool(t, g, "SchemaTest.Types")
	bearer := token(t, typesScopes...)

	for _, f := range []toolfleetv1.ToolFormat{
		toolfleetv1.ToolFormat_TOOL_FORMAT_CANONICAL, toolfleetv1.ToolFormat_TOOL_FORMAT_OPENAI,
		toolfleetv1.ToolFormat_TOOL_FORMAT_OPENAI_STRICT, toolfleetv1.ToolFormat_TOOL_FORMAT_ANTHROPIC,
		toolfleetv1.ToolFormat_TOOL_FORMAT_GEMINI, toolfleetv1.ToolFormat_TOOL_FORMAT_MCP,
	} {
		resp, err := g.ListTools(&toolfleetv1.ListToolsRequest{Filter: "SchemaTest.Types", Format: f})
		if err != nil || len(resp.GetTools()) != 1 {
			t.Fatalf("%v: %v %v", f, resp, err)
		}
		doc := map[string]any{"input": resp.GetTools()[0].GetInputSchema().AsMap(), "output": resp.GetTools()[0].GetOutputSchema().AsMap()}
		if r := resp.GetRendered(); len(r) > 0 {
			doc = r[0].AsMap()
		}
		var lists [][]any
		enumLists(doc, &lists)
		if len(lists) == 0 {
			t.Fatalf("%v: no enum in %v", f, doc)
		}
		for _, l := range lists {
			names := slices.DeleteFunc(slices.Clone(l), func(v any) bool { return v == nil }) // strict adds null
			if !slices.Equal(names, []any{"red", "green"}) {
				t.Errorf("%v: enum %v, want [red green]", f, l)
			}
		}
	}

	input := map[string]any{"color": "red", "colors": []any{"green", "COLOR_RED"}}
	for _, p := range protocols {
		o := p.call(t, g.Addr(), "SchemaTest.Types", input, bearer)
		echo, _ := o.value["echo"].(map[string]any)
		if o.kind != "success" || echo["color"] != "red" || fmt.Sprint(echo["colors"]) != "[green red]" {
			t.Errorf("%s: %+v, want the echo with color red and colors [green red]", p.name, o)
		}
		o = p.call(t, g.Addr(), "SchemaTest.Types", map[string]any{"color": "COLOR_UNSPECIFIED"}, bearer)
		echo, _ = o.value["echo"].(map[string]any)
		if _, shown := echo["color"]; o.kind != "success" || shown {
			t.Errorf("%s: zero value echoed as %+v, want it left out", p.name, o)
		}
		o = p.call(t, g.Addr(), "SchemaTest.Types", map[string]any{"color": "blue"}, bearer)
		if o.kind != gateway.KindValidation || o.paramErrors["color"] != "must be one of: red, green" {
			t.Errorf("%s: blue gave %+v, want the model names", p.name, o)
		}
	}

	c := sdk.NewClient(&sdk.Implementation{Name: "enum-test", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: "http://" + g.Addr() + "/mcp",
		HTTPClient: &http.Client{Transport: bearerTransport{bearer}, Timeout: time.Minute}, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "SchemaTest_Types", Arguments: input,
		Meta: sdk.Meta{mcp.MetaApprover: "tester"}})
	if err != nil || res.IsError {
		t.Fatalf("MCP tools/call: %v %+v", err, res)
	}
	st, _ := res.StructuredContent.(map[string]any)
	echo, _ := st["echo"].(map[string]any)
	if echo["color"] != "red" || fmt.Sprint(echo["colors"]) != "[green red]" {
		t.Errorf("MCP structuredContent %v, want color red and colors [green red]", st)
	}
	text := res.Content[0].(*sdk.TextContent).Text
	if strings.Contains(text, "COLOR_") {
		t.Errorf("MCP text shows proto names: %s", text)
	}
}

// TestEnumModelNamesBehindAHandle: a result kept behind a handle reads with
// model names, as the inline result would.
func TestEnumModelNamesBehindAHandle(t *testing.T) {
	t.Parallel()
	nats := natstest.Start(t)
	g := startGateway(t, gateway.Config{NATSURL: nats.URL(), Workers: []string{schemaTestWorker(t, "")}, Results: memResults})
	waitTool(t, g, "SchemaTest.Types")
	c := newHandleCaller(t, g, "alice")
	var h *toolfleetv1.ResultHandle
	waitFor(t, "a result handle", func() bool {
		resp, err := grpcClient(t, g.Addr()).CallTool(c.ctx(), &toolfleetv1.CallToolRequest{ToolId: "SchemaTest.Types",
			Input: mustStruct(t, map[string]any{"s": bigString(8 << 10), "color": "green", "colors": []any{"red"}}), Approval: testApproval, AllowResultHandle: true})
		if err != nil {
			t.Fatalf("call: %v", err)
		}
		h = resp.GetResultHandle()
		return h != nil
	})
	b, err := c.fetch(h.GetId())
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Echo struct {
			Color  string   `json:"color"`
			Colors []string `json:"colors"`
		} `json:"echo"`
	}
	if err := json.Unmarshal(b, &got); err != nil || got.Echo.Color != "green" || fmt.Sprint(got.Echo.Colors) != "[red]" {
		t.Fatalf("handle bytes: %+v %v", got.Echo, err)
	}
}
