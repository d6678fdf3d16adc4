package wire

import (
	"encoding/json"
	"errors"

	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm/internal/canon"
)

// MCPToolEntry is one entry of an MCP tools/list result.
type MCPToolEntry struct {
	Name         string          `json:"name"`
	Title        string          `json:"title,omitempty"`
	Description  string          `json:"description,omitempty"`
	InputSchema  map[string]any  `json:"inputSchema"`
	OutputSchema map[string]any  `json:"outputSchema,omitempty"`
	Annotations  *MCPAnnotations `json:"annotations,omitempty"`
}

// MCPAnnotations are MCP's tool behaviour hints. All are always rendered:
// MCP's defaults (destructive, open world) differ from Go zero values.
type MCPAnnotations struct {
	Title           string `json:"title,omitempty"`
	ReadOnlyHint    bool   `json:"readOnlyHint"`
	DestructiveHint bool   `json:"destructiveHint"`
	IdempotentHint  bool   `json:"idempotentHint"`
	OpenWorldHint   bool   `json:"openWorldHint"`
}

// MCPTool renders a definition as an MCP tools/list entry: hints become
// annotations, the output schema outputSchema (MCP requires an object
// schema there, so a non-object output schema is left out).
func MCPTool(d *toolfleetv1.ToolDefinition) MCPToolEntry {
	e := MCPToolEntry{Name: d.GetModelName(), Title: d.GetTitle(), Description: d.GetDescription(), InputSchema: AnthropicSchema(canon.SchemaOf(d), false)}
	if out := d.GetOutputSchema(); out != nil {
		if s := out.AsMap(); s["type"] == "object" {
			e.OutputSchema = s
		}
	}
	h := d.GetHints()
	if h == nil {
		// MCP defaults for a tool that says nothing.
		h = &toolfleetv1.ResolvedHints{Destructive: true, OpenWorld: true}
	}
	e.Annotations = &MCPAnnotations{Title: d.GetTitle(), ReadOnlyHint: h.GetReadOnly(), DestructiveHint: h.GetDestructive(), IdempotentHint: h.GetIdempotent(), OpenWorldHint: h.GetOpenWorld()}
	return e
}

// MCPToolsList renders a tools/list result: {"tools": [...]}.
func MCPToolsList(defs []*toolfleetv1.ToolDefinition) ([]byte, error) {
	tools := make([]MCPToolEntry, 0, len(defs))
	for _, d := range defs {
		tools = append(tools, MCPTool(d))
	}
	return json.Marshal(map[string]any{"tools": tools})
}

// ParseMCPToolsList reads a tools/list result back into definitions.
// Missing annotations take MCP's defaults.
func ParseMCPToolsList(body []byte) ([]*toolfleetv1.ToolDefinition, error) {
	var list struct {
		Tools []struct {
			MCPToolEntry
			Annotations *struct {
				ReadOnlyHint    *bool `json:"readOnlyHint"`
				DestructiveHint *bool `json:"destructiveHint"`
				IdempotentHint  *bool `json:"idempotentHint"`
				OpenWorldHint   *bool `json:"openWorldHint"`
			} `json:"annotations"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, malformed("mcp tools/list", err)
	}
	var defs []*toolfleetv1.ToolDefinition
	for _, t := range list.Tools {
		d, err := defFromWire(t.Name, t.Description, t.InputSchema)
		if err != nil {
			return nil, err
		}
		d.Title = t.Title
		if t.OutputSchema != nil {
			if d.OutputSchema, err = SchemaToStruct(t.OutputSchema); err != nil {
				return nil, err
			}
		}
		h := &toolfleetv1.ResolvedHints{Destructive: true, OpenWorld: true}
		if a := t.Annotations; a != nil {
			h.ReadOnly = orDefault(a.ReadOnlyHint, false)
			h.Destructive = orDefault(a.DestructiveHint, true)
			h.Idempotent = orDefault(a.IdempotentHint, false)
			h.OpenWorld = orDefault(a.OpenWorldHint, true)
		}
		d.Hints = h
		defs = append(defs, d)
	}
	return defs, nil
}

func orDefault(b *bool, def bool) bool {
	if b == nil {
		return def
	}
	return *b
}

// MCPContent is one content block of a tools/call result.
type MCPContent struct {
	Type string `json:"type"`
	Text string `json:"text,omitempty"`
}

// MCPResult is an MCP tools/call result.
type MCPResult struct {
	Content           []MCPContent `json:"content"`
	StructuredContent any          `json:"structuredContent,omitempty"`
	IsError           bool         `json:"isError,omitempty"`
}

// MCPCallResult renders a tool result as a tools/call result: the text as a
// text block, a structured object value as structuredContent too (MCP
// wants both, for clients that only read text).
func MCPCallResult(r *toolfleetv1.ToolResult) ([]byte, error) {
	out := MCPResult{Content: []MCPContent{{Type: "text", Text: canon.ResultText(r)}}, IsError: r.GetIsError()}
	if st := r.GetStructured(); st != nil && st.GetStructValue() != nil {
		out.StructuredContent = st.AsInterface()
	}
	return json.Marshal(out)
}

// ParseMCPCallResult reads a tools/call result; text blocks are joined and
// non-text blocks (images, resources) are kept as their JSON.
func ParseMCPCallResult(callID, name string, body []byte) (*toolfleetv1.ToolResult, error) {
	var in struct {
		Content           []json.RawMessage `json:"content"`
		StructuredContent any               `json:"structuredContent"`
		IsError           bool              `json:"isError"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, malformed("mcp tools/call result", err)
	}
	if in.Content == nil && in.StructuredContent == nil {
		return nil, malformed("mcp tools/call result", errors.New("no content"))
	}
	r := &toolfleetv1.ToolResult{CallId: callID, Name: name, IsError: in.IsError}
	for _, raw := range in.Content {
		var c MCPContent
		if err := json.Unmarshal(raw, &c); err != nil {
			return nil, malformed("mcp content", err)
		}
		if c.Type == "text" {
			r.Content += c.Text
		} else {
			r.Content += string(raw)
		}
	}
	if in.StructuredContent != nil {
		v, err := structpb.NewValue(in.StructuredContent)
		if err != nil {
			return nil, malformed("mcp structuredContent", err)
		}
		r.Structured = v
	}
	return r, nil
}
