package llm

import (
	"encoding/json"
	"fmt"

	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// Format is one provider's wire dialect. Every method is a pure function of
// its input: no network, no clock.
type Format interface {
	// Name is the format's short name ("openai", "openai-responses",
	// "anthropic", "gemini", "bedrock").
	Name() string
	// RenderTools renders tool declarations exactly as they appear in a
	// request body (a JSON array).
	RenderTools(tools []*toolfleetv1.ToolDefinition, strict bool) ([]byte, error)
	// ParseTools reads a JSON array of tool declarations in this format back
	// into definitions carrying ModelName, Description and InputSchema.
	ParseTools(body []byte) ([]*toolfleetv1.ToolDefinition, error)
	// RenderRequest renders a request body.
	RenderRequest(req *Request) ([]byte, error)
	// ParseRequest reads a request body back (for proxies and round trips).
	ParseRequest(body []byte) (*Request, error)
	// RenderResponse renders an assistant message as a non-streamed response body.
	RenderResponse(msg *toolfleetv1.Message) ([]byte, error)
	// ParseResponse reads a non-streamed response body.
	ParseResponse(body []byte) (*toolfleetv1.Message, error)
	// NewStreamDecoder returns a decoder for one streamed response.
	NewStreamDecoder() StreamDecoder
}

// Formats returns every conversation format, in a stable order.
func Formats() []Format {
	return []Format{OpenAIChat{}, OpenAIResponses{}, Anthropic{}, Gemini{}, Bedrock{}}
}

// FormatByName returns the format called name.
func FormatByName(name string) (Format, error) {
	for _, f := range Formats() {
		if f.Name() == name {
			return f, nil
		}
	}
	return nil, fmt.Errorf("llm: unknown format %q", name)
}

// ConvertTools re-renders a tool list from one format in another, e.g. an
// OpenAI tools array as Anthropic tools.
func ConvertTools(from, to Format, body []byte, strict bool) ([]byte, error) {
	defs, err := from.ParseTools(body)
	if err != nil {
		return nil, err
	}
	return to.RenderTools(defs, strict)
}

// malformed wraps a decoding error with ErrMalformed and the format name.
func malformed(format string, err error) error {
	return fmt.Errorf("%w: %s: %v", ErrMalformed, format, err)
}

// rawJSON marshals v; all values rendered here are JSON-safe by construction.
func rawJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("llm: marshal: %v", err))
	}
	return b
}

// schemaOf returns the input schema of d as a map. A free-text tool (one
// with an input_format) is declared, where a format has no free-text tools,
// as an object with one string property "input" whose description carries
// the grammar: the model sees it, nothing enforces it.
func schemaOf(d *toolfleetv1.ToolDefinition) map[string]any {
	if f := d.GetInputFormat(); f != nil {
		desc := "Free-form text input."
		if f.GetType() == "grammar" {
			desc = "Text in the language of this " + f.GetSyntax() + " grammar:\n" + f.GetDefinition()
		}
		return map[string]any{
			"type":                 "object",
			"properties":           map[string]any{freeTextKey: map[string]any{"type": "string", "description": desc}},
			"required":             []any{freeTextKey},
			"additionalProperties": false,
		}
	}
	return SchemaFromStruct(d.GetInputSchema())
}

// freeTextKey is the argument a free-text call's input travels under in
// formats without free-text tools.
const freeTextKey = "input"

// callArguments is the JSON object a format without free-text calls sends
// for c: its arguments, or {"input": text} for a free-text call.
func callArguments(c *toolfleetv1.ToolCall) json.RawMessage {
	if c.Input != nil {
		return rawJSON(map[string]string{freeTextKey: c.GetInput()})
	}
	return encodeArguments(c.GetArguments())
}

// argumentsOf is callArguments as a Struct, for the text protocols that
// render arguments one by one.
func argumentsOf(c *toolfleetv1.ToolCall) *structpb.Struct {
	if c.Input != nil {
		return &structpb.Struct{Fields: map[string]*structpb.Value{freeTextKey: structpb.NewStringValue(c.GetInput())}}
	}
	return c.GetArguments()
}

// inputFormatFromWire reads a free-text input format ({type: text} or
// {type: grammar, syntax, definition}); nil for none.
func inputFormatFromWire(typ, syntax, definition string) *toolfleetv1.ToolInputFormat {
	if typ == "" {
		typ = "text"
	}
	return &toolfleetv1.ToolInputFormat{Type: typ, Syntax: syntax, Definition: definition}
}

// defFromWire builds a definition from a parsed declaration.
func defFromWire(name, description string, schema map[string]any) (*toolfleetv1.ToolDefinition, error) {
	s, err := SchemaToStruct(schema)
	if err != nil {
		return nil, err
	}
	return &toolfleetv1.ToolDefinition{ModelName: name, Description: description, InputSchema: s}, nil
}

// resultText is what a text-only wire field shows for a tool result. A
// result that only loads deferred tools (tool_references, which only
// Anthropic carries) says so as JSON: {"tool_references": [names]}.
func resultText(r *toolfleetv1.ToolResult) string {
	if r.GetContent() == "" && r.GetStructured() == nil && len(r.GetToolReferences()) > 0 {
		return string(rawJSON(map[string][]string{"tool_references": r.GetToolReferences()}))
	}
	if r.GetContent() != "" || r.GetStructured() == nil {
		return r.GetContent()
	}
	b, err := json.Marshal(r.GetStructured().AsInterface())
	if err != nil {
		return ""
	}
	return string(b)
}
