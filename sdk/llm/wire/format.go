package wire

import (
	"fmt"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm"
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
	RenderRequest(req *llm.Request) ([]byte, error)
	// ParseRequest reads a request body back (for proxies and round trips).
	ParseRequest(body []byte) (*llm.Request, error)
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
	return fmt.Errorf("%w: %s: %v", llm.ErrMalformed, format, err)
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

// providerError is the error object OpenAI-style bodies and events carry.
type providerError struct {
	Type    string `json:"type,omitempty"`
	Code    any    `json:"code,omitempty"` // a string, a number or null
	Message string `json:"message,omitempty"`
}

// apiError turns it into an *llm.APIError; code wins over type when set.
func (e *providerError) apiError(provider string) *llm.APIError {
	code := e.Type
	if c, ok := e.Code.(string); ok && c != "" {
		code = c
	}
	return llm.NewStreamError(provider, code, e.Message)
}
