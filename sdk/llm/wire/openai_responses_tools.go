package wire

import (
	"encoding/json"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm/internal/canon"
)

// RenderTools implements Format.
func (OpenAIResponses) RenderTools(tools []*toolfleetv1.ToolDefinition, strict bool) ([]byte, error) {
	return json.Marshal(responsesTools(tools, strict))
}

func responsesTools(tools []*toolfleetv1.ToolDefinition, strict bool) []orTool {
	out := make([]orTool, 0, len(tools))
	for _, d := range tools {
		if f := d.GetInputFormat(); f != nil {
			out = append(out, orTool{Type: "custom", Name: d.GetModelName(), Description: d.GetDescription(), DeferLoading: d.GetDeferLoading(),
				Format: &orFormat{Type: f.GetType(), Syntax: f.GetSyntax(), Definition: f.GetDefinition()}})
			continue
		}
		schema := canon.SchemaOf(d)
		if strict {
			schema = OpenAIStrictSchema(schema)
		}
		// The Responses API defaults strict to true, so the flag is always explicit.
		out = append(out, orTool{Type: "function", Name: d.GetModelName(), Description: d.GetDescription(), Parameters: schema, Strict: &strict, DeferLoading: d.GetDeferLoading()})
	}
	return out
}

// ParseTools implements Format. OpenAI's own tools (tool_search,
// web_search, …) are not definitions and are left out.
func (OpenAIResponses) ParseTools(body []byte) ([]*toolfleetv1.ToolDefinition, error) {
	var tools []json.RawMessage
	if err := json.Unmarshal(body, &tools); err != nil {
		return nil, malformed("openai-responses tools", err)
	}
	defs, _, _, err := responsesDefs(tools)
	return defs, err
}

// responsesDefs splits a tools array into definitions (function and custom
// tools) and OpenAI's own tools, kept verbatim.
func responsesDefs(tools []json.RawMessage) (defs []*toolfleetv1.ToolDefinition, native []json.RawMessage, strict bool, err error) {
	for _, raw := range tools {
		var t orTool
		if err := json.Unmarshal(raw, &t); err != nil {
			return nil, nil, false, malformed("openai-responses tools", err)
		}
		var d *toolfleetv1.ToolDefinition
		switch t.Type {
		case "function":
			if d, err = defFromWire(t.Name, t.Description, t.Parameters); err != nil {
				return nil, nil, false, err
			}
			strict = strict || (t.Strict != nil && *t.Strict)
		case "custom":
			d = &toolfleetv1.ToolDefinition{ModelName: t.Name, Description: t.Description, InputFormat: inputFormatFromWire("", "", "")}
			if f := t.Format; f != nil {
				d.InputFormat = inputFormatFromWire(f.Type, f.Syntax, f.Definition)
			}
		default:
			native = append(native, raw)
			continue
		}
		d.DeferLoading = t.DeferLoading
		defs = append(defs, d)
	}
	return defs, native, strict, nil
}
