package wire

import (
	"encoding/json"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm/internal/convtest"
)

func TestMCPToolsList(t *testing.T) {
	t.Parallel()
	out, err := structpb.NewStruct(map[string]any{"type": "object", "properties": map[string]any{"sum": map[string]any{"type": "number"}}})
	if err != nil {
		t.Fatal(err)
	}
	defs := convtest.CalculatorTools(t)
	defs[0].Title = "Add"
	defs[0].OutputSchema = out
	defs[0].Hints = &toolfleetv1.ResolvedHints{ReadOnly: true, Idempotent: true}
	defs[1].Hints = &toolfleetv1.ResolvedHints{Destructive: true, OpenWorld: true}
	body, err := MCPToolsList(defs)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "mcp/tools_list.json", indentJSON(t, body))
	back, err := ParseMCPToolsList(body)
	if err != nil {
		t.Fatal(err)
	}
	for i := range defs {
		if !proto.Equal(back[i], defs[i]) {
			t.Errorf("tool %d round trip:\n got %v\nwant %v", i, back[i], defs[i])
		}
	}
	// Annotations left out take MCP's defaults.
	bare, err := ParseMCPToolsList([]byte(`{"tools":[{"name":"x","inputSchema":{"type":"object"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if h := bare[0].GetHints(); h.GetReadOnly() || !h.GetDestructive() || h.GetIdempotent() || !h.GetOpenWorld() {
		t.Errorf("default hints = %v", h)
	}
}

func TestMCPCallResult(t *testing.T) {
	t.Parallel()
	structured, err := structpb.NewValue(map[string]any{"sum": 5})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		result *toolfleetv1.ToolResult
		want   string
	}{
		{"text", &toolfleetv1.ToolResult{CallId: "c", Name: "n", Content: "5"}, `{"content":[{"type":"text","text":"5"}]}`},
		{"structured", &toolfleetv1.ToolResult{CallId: "c", Name: "n", Content: `{"sum":5}`, Structured: structured}, `{"content":[{"type":"text","text":"{\"sum\":5}"}],"structuredContent":{"sum":5}}`},
		{"error", &toolfleetv1.ToolResult{CallId: "c", Name: "n", Content: "division by zero", IsError: true}, `{"content":[{"type":"text","text":"division by zero"}],"isError":true}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			body, err := MCPCallResult(tt.result)
			if err != nil {
				t.Fatal(err)
			}
			if string(body) != tt.want {
				t.Errorf("body = %s, want %s", body, tt.want)
			}
			back, err := ParseMCPCallResult("c", "n", body)
			if err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(back, tt.result) {
				t.Errorf("round trip = %v, want %v", back, tt.result)
			}
		})
	}
	img := `{"content":[{"type":"text","text":"see "},{"type":"image","data":"AAA=","mimeType":"image/png"}]}`
	r, err := ParseMCPCallResult("c", "n", []byte(img))
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(r.Content[4:]), &v); err != nil || v["type"] != "image" {
		t.Errorf("non-text block not kept: %q", r.Content)
	}
}
