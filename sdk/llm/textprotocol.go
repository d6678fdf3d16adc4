package llm

import toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"

// TextProtocol is a way for a model without native tool calls to call
// tools in plain text. Each protocol teaches itself in the system prompt,
// renders past calls and results as text, and parses calls out of a reply.
// The protocols themselves, the open-model dialects and the Model wrappers
// that use them (WithTextProtocol, WithAutoFallback) live in package
// sdk/llm/dialect; the core keeps only this interface, which the scripted
// model of sdk/llm/llmtest also writes calls with.
type TextProtocol interface {
	// Name is "fenced", "hermes", "xml" or a dialect's name; stable, it
	// is what a run's tool_protocol says.
	Name() string
	// Instructions is the system-prompt text that teaches the protocol,
	// listing every tool with its input schema.
	Instructions(tools []*toolfleetv1.ToolDefinition) string
	// RenderCall renders a call the way the model is taught to write it.
	RenderCall(call *toolfleetv1.ToolCall) string
	// RenderResult renders a result for a user message.
	RenderResult(result *toolfleetv1.ToolResult) string
	// Parse returns text with the call blocks removed and the calls in
	// order. tools (may be nil) type the XML protocol's parameter values.
	// A malformed block is an error, never a silent drop.
	Parse(text string, tools []*toolfleetv1.ToolDefinition) (string, []*toolfleetv1.ToolCall, error)
	// OpenTag and CloseTag delimit a block, for streaming hold-back.
	OpenTag() string
	CloseTag() string
}
