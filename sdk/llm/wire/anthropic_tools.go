package wire

import (
	"bytes"
	"encoding/json"
	"errors"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/internal/canon"
)

// RenderTools implements Format.
func (Anthropic) RenderTools(tools []*toolfleetv1.ToolDefinition, strict bool) ([]byte, error) {
	return json.Marshal(anthropicTools(tools, strict))
}

func anthropicTools(tools []*toolfleetv1.ToolDefinition, strict bool) []anTool {
	out := make([]anTool, 0, len(tools))
	for _, d := range tools {
		out = append(out, anTool{
			Name: d.GetModelName(), Description: d.GetDescription(), InputSchema: AnthropicSchema(canon.SchemaOf(d), strict), Strict: strict,
			AllowedCallers: d.GetAllowedCallers(), DeferLoading: d.GetDeferLoading(), InputExamples: exampleInputs(d),
		})
	}
	return out
}

// exampleInputs are the inputs of d's examples that are JSON objects,
// compacted; others (and every example of a free-text tool) are left out.
func exampleInputs(d *toolfleetv1.ToolDefinition) []json.RawMessage {
	if d.GetInputFormat() != nil {
		return nil
	}
	var out []json.RawMessage
	for _, e := range d.GetExamples() {
		var obj map[string]json.RawMessage
		if json.Unmarshal([]byte(e.GetInputJson()), &obj) != nil || obj == nil {
			continue
		}
		var b bytes.Buffer
		if json.Compact(&b, []byte(e.GetInputJson())) == nil {
			out = append(out, b.Bytes())
		}
	}
	return out
}

// examplesFromWire turns input_examples back into examples (input only: the
// wire has no description).
func examplesFromWire(inputs []json.RawMessage) ([]*toolfleetv1.ToolExample, error) {
	var out []*toolfleetv1.ToolExample
	for _, in := range inputs {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(in, &obj); err != nil || obj == nil {
			return nil, malformed("anthropic tools", errors.New("an input example is not a JSON object"))
		}
		var b bytes.Buffer
		if err := json.Compact(&b, in); err != nil {
			return nil, malformed("anthropic tools", err)
		}
		out = append(out, &toolfleetv1.ToolExample{InputJson: b.String()})
	}
	return out, nil
}

// ParseTools implements Format.
// Anthropic's own tools (a "type" other than "custom", e.g. the code
// execution tool) are not definitions and are left out.
func (Anthropic) ParseTools(body []byte) ([]*toolfleetv1.ToolDefinition, error) {
	var tools []json.RawMessage
	if err := json.Unmarshal(body, &tools); err != nil {
		return nil, malformed("anthropic tools", err)
	}
	defs, _, _, err := anthropicDefs(tools)
	return defs, err
}

// anthropicDefs splits a tools array into client tool definitions and
// Anthropic's own tools, kept verbatim.
func anthropicDefs(tools []json.RawMessage) (defs []*toolfleetv1.ToolDefinition, native []json.RawMessage, strict bool, err error) {
	for _, raw := range tools {
		var t anTool
		if err := json.Unmarshal(raw, &t); err != nil {
			return nil, nil, false, malformed("anthropic tools", err)
		}
		if !t.isClientTool() {
			native = append(native, raw)
			continue
		}
		d, err := defFromWire(t.Name, t.Description, t.InputSchema)
		if err != nil {
			return nil, nil, false, err
		}
		d.AllowedCallers = t.AllowedCallers
		d.DeferLoading = t.DeferLoading
		if d.Examples, err = examplesFromWire(t.InputExamples); err != nil {
			return nil, nil, false, err
		}
		defs = append(defs, d)
		strict = strict || t.Strict
	}
	return defs, native, strict, nil
}

func anthropicToolChoice(req *llm.Request) *anToolChoice {
	var c *anToolChoice
	switch req.ToolChoice.Mode {
	case llm.ToolChoiceAuto:
		c = &anToolChoice{Type: "auto"}
	case llm.ToolChoiceNone:
		return &anToolChoice{Type: "none"}
	case llm.ToolChoiceRequired:
		c = &anToolChoice{Type: "any"}
	case llm.ToolChoiceTool:
		c = &anToolChoice{Type: "tool", Name: req.ToolChoice.Name}
	}
	if req.ParallelToolCalls != nil && !*req.ParallelToolCalls && len(req.Tools) > 0 {
		if c == nil {
			c = &anToolChoice{Type: "auto"}
		}
		disable := true
		c.DisableParallelToolUse = &disable
	}
	return c
}
