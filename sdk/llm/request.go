package llm

import (
	"encoding/json"

	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm/internal/canon"
)

// Canonical stop reasons stored in Message.stop_reason. Provider values are
// mapped onto these so callers never switch on provider spellings.
const (
	StopEndTurn       = "end_turn"
	StopToolCalls     = "tool_calls"
	StopMaxTokens     = "max_tokens"
	StopContentFilter = "content_filter"
	// StopPaused means the provider paused a long turn of its own server
	// tools (Anthropic's "pause_turn", e.g. during code execution): send
	// the conversation back, this message included, to let it continue.
	// It is not an answer.
	StopPaused = "pause_turn"
)

// ToolChoiceMode says whether and how the model must call tools.
type ToolChoiceMode int

const (
	// ToolChoiceDefault leaves the choice to the provider's default (auto when tools are given).
	ToolChoiceDefault ToolChoiceMode = iota
	// ToolChoiceAuto lets the model decide.
	ToolChoiceAuto
	// ToolChoiceNone forbids tool calls.
	ToolChoiceNone
	// ToolChoiceRequired forces at least one tool call.
	ToolChoiceRequired
	// ToolChoiceTool forces a call of the tool named in ToolChoice.Name.
	ToolChoiceTool
)

// ToolChoice is the canonical tool_choice.
type ToolChoice struct {
	Mode ToolChoiceMode
	// Name is the model-facing tool name when Mode is ToolChoiceTool.
	Name string
}

// Request is everything a provider request body is rendered from.
type Request struct {
	// Model is the provider's model id. Gemini and Bedrock carry it in the URL
	// and leave it out of the body.
	Model string
	// Messages is the conversation; ROLE_SYSTEM messages become the provider's
	// system prompt.
	Messages []*toolfleetv1.Message
	// Tools are declared under their ModelName.
	Tools []*toolfleetv1.ToolDefinition
	// ToolChoice defaults to the provider's default.
	ToolChoice ToolChoice
	// ParallelToolCalls nil keeps the provider default; false asks for at most
	// one call per turn where the provider supports it.
	ParallelToolCalls *bool
	// MaxTokens bounds the output; 0 keeps the provider default (Anthropic
	// requires one, so 4096 is sent there).
	MaxTokens int
	// Strict renders tool schemas with the provider's strict transform.
	Strict bool
	// Stream asks for a streamed response where the body carries that flag.
	Stream bool
	// NativeTools are provider-defined tool declarations passed through
	// verbatim, by format name: e.g. "anthropic" →
	// {"type": "code_execution_20250825", "name": "code_execution"}, which
	// lets tools whose AllowedCallers name it be called from the model's
	// code sandbox, or {"type": "tool_search_tool_regex_20251119", "name":
	// "tool_search_tool_regex"}, which finds tools declared with
	// DeferLoading; "openai-responses" → {"type": "tool_search"}. Other
	// formats ignore them.
	NativeTools map[string][]json.RawMessage
	// Container is the provider execution container to resume (Anthropic
	// code execution). Empty means the Container of the latest assistant
	// message, which is how a conversation normally carries it.
	Container string
	// ThinkingOpen says the prompt ends inside an opened reasoning tag (a
	// chat template that prefills <think> to start the reply in thinking),
	// so the reply reads "plan</think>answer": a text-protocol dialect then
	// reads its text up to the close as thinking. Dialects without a
	// reasoning tag, and native tool calling, ignore it.
	ThinkingOpen bool
}

// Text returns a text part.
func Text(s string) *toolfleetv1.Part {
	return &toolfleetv1.Part{Kind: &toolfleetv1.Part_Text{Text: s}}
}

// CallPart returns a tool-call part.
func CallPart(id, name string, args map[string]any) *toolfleetv1.Part {
	s, err := structpb.NewStruct(args)
	if err != nil {
		// Arguments built in Go code with non-JSON values are a programming error.
		panic("llm: CallPart: " + err.Error())
	}
	return &toolfleetv1.Part{Kind: &toolfleetv1.Part_ToolCall{ToolCall: &toolfleetv1.ToolCall{Id: id, Name: name, Arguments: s}}}
}

// ResultPart returns a tool-result part.
func ResultPart(callID, name, content string, isError bool) *toolfleetv1.Part {
	return &toolfleetv1.Part{Kind: &toolfleetv1.Part_ToolResult{ToolResult: &toolfleetv1.ToolResult{CallId: callID, Name: name, Content: content, IsError: isError}}}
}

// NewMessage returns a message of role with parts.
func NewMessage(role toolfleetv1.Role, parts ...*toolfleetv1.Part) *toolfleetv1.Message {
	return &toolfleetv1.Message{Role: role, Parts: parts}
}

// System returns a system message with text.
func System(text string) *toolfleetv1.Message {
	return NewMessage(toolfleetv1.Role_ROLE_SYSTEM, Text(text))
}

// User returns a user message with text.
func User(text string) *toolfleetv1.Message {
	return NewMessage(toolfleetv1.Role_ROLE_USER, Text(text))
}

// MessageText joins the text parts of m.
func MessageText(m *toolfleetv1.Message) string { return canon.MessageText(m) }

// ToolCalls returns the tool calls of m in order.
func ToolCalls(m *toolfleetv1.Message) []*toolfleetv1.ToolCall { return canon.ToolCalls(m) }
