package wire

import (
	"bytes"
	"encoding/json"
	"errors"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/internal/canon"
)

// Anthropic is the Anthropic Messages format: flat tools with input_schema,
// tool_use blocks with the input as an object, tool_result blocks inside a
// user message with is_error, thinking blocks with their signature.
// Tools carry defer_loading and input_examples (from the definition's
// examples); tool_reference blocks in a tool_result are the result's
// tool_references; server tool blocks (server_tool_use,
// tool_search_tool_result, code execution) are carried as provider blocks.
type Anthropic struct{}

// Name implements Format.
func (Anthropic) Name() string { return "anthropic" }

// anthropicDefaultMaxTokens is sent when the request sets none: the API
// requires max_tokens.
const anthropicDefaultMaxTokens = 4096

type anTool struct {
	// Type is set on Anthropic's own tools ("code_execution_20250825");
	// "custom" or empty for a client tool.
	Type           string         `json:"type,omitempty"`
	Name           string         `json:"name"`
	Description    string         `json:"description,omitempty"`
	InputSchema    map[string]any `json:"input_schema"`
	Strict         bool           `json:"strict,omitempty"`
	AllowedCallers []string       `json:"allowed_callers,omitempty"`
	// DeferLoading keeps the tool out of the context until a tool search
	// returns a tool_reference to it.
	DeferLoading bool `json:"defer_loading,omitempty"`
	// InputExamples are example inputs (objects valid for input_schema).
	InputExamples []json.RawMessage `json:"input_examples,omitempty"`
}

// isClientTool tells a tool toolfleet runs from one of Anthropic's own
// (server or Anthropic-defined) tools, which are passed through verbatim.
func (t anTool) isClientTool() bool { return t.Type == "" || t.Type == "custom" }

type anToolChoice struct {
	Type                   string `json:"type"`
	Name                   string `json:"name,omitempty"`
	DisableParallelToolUse *bool  `json:"disable_parallel_tool_use,omitempty"`
}

type anRequest struct {
	Model      string            `json:"model,omitempty"`
	MaxTokens  int               `json:"max_tokens"`
	System     json.RawMessage   `json:"system,omitempty"`
	Messages   []anMessage       `json:"messages"`
	Tools      []json.RawMessage `json:"tools,omitempty"`
	ToolChoice *anToolChoice     `json:"tool_choice,omitempty"`
	Stream     bool              `json:"stream,omitempty"`
	// Container is the code-execution container to resume (a string id;
	// an object form {"id": …} is read too).
	Container json.RawMessage `json:"container,omitempty"`
}

type anMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type anBlock struct {
	Type      string          `json:"type"`
	Text      *string         `json:"text,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
	Content   json.RawMessage `json:"content,omitempty"`
	IsError   bool            `json:"is_error,omitempty"`
	Thinking  *string         `json:"thinking,omitempty"`
	Signature string          `json:"signature,omitempty"`
	Data      string          `json:"data,omitempty"`
	// Caller marks a tool_use made by the model's code sandbox.
	Caller *anCaller `json:"caller,omitempty"`

	// raw is the block as received, for block types toolfleet carries
	// without interpreting; when set it is also what MarshalJSON writes.
	raw json.RawMessage
}

type anCaller struct {
	Type   string `json:"type"`
	ToolID string `json:"tool_id,omitempty"`
}

// MarshalJSON writes a carried provider block verbatim.
func (b anBlock) MarshalJSON() ([]byte, error) {
	if b.raw != nil {
		return b.raw, nil
	}
	type plain anBlock
	return json.Marshal(plain(b))
}

// UnmarshalJSON keeps the raw block next to the decoded fields.
func (b *anBlock) UnmarshalJSON(data []byte) error {
	type plain anBlock
	var p plain
	if err := json.Unmarshal(data, &p); err != nil {
		return err
	}
	*b = anBlock(p)
	b.raw = bytes.Clone(data)
	return nil
}

// anthropicParsed reports the block types toolfleet parses itself; every
// other assistant block becomes a ProviderBlock.
func anthropicParsed(typ string) bool {
	switch typ {
	case "text", "thinking", "redacted_thinking", "tool_use", "tool_result":
		return true
	}
	return false
}

func providerBlockPart(provider, typ string, raw []byte) *toolfleetv1.Part {
	return &toolfleetv1.Part{Kind: &toolfleetv1.Part_ProviderBlock{ProviderBlock: &toolfleetv1.ProviderBlock{Provider: provider, Type: typ, Json: raw}}}
}

type anUsage struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens,omitempty"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens,omitempty"`
}

func (u *anUsage) canonical() *toolfleetv1.Usage {
	if u == nil {
		return nil
	}
	return &toolfleetv1.Usage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, CacheReadTokens: u.CacheReadInputTokens, CacheWriteTokens: u.CacheCreationInputTokens}
}

type anResponse struct {
	ID         string    `json:"id"`
	Type       string    `json:"type"`
	Role       string    `json:"role"`
	Model      string    `json:"model"`
	Content    []anBlock `json:"content"`
	StopReason *string   `json:"stop_reason"`
	Usage      *anUsage  `json:"usage,omitempty"`
	// Container is the code-execution container the turn ran in.
	Container *anContainer `json:"container,omitempty"`
}

type anContainer struct {
	ID        string `json:"id"`
	ExpiresAt string `json:"expires_at,omitempty"`
}

// RenderRequest implements Format. Tool messages become user messages of
// tool_result blocks; a user message right after them is merged in, since
// Anthropic requires alternating roles.
func (Anthropic) RenderRequest(req *llm.Request) ([]byte, error) {
	maxTokens := req.MaxTokens
	if maxTokens == 0 {
		maxTokens = anthropicDefaultMaxTokens
	}
	out := anRequest{Model: req.Model, MaxTokens: maxTokens, Messages: []anMessage{}, ToolChoice: anthropicToolChoice(req), Stream: req.Stream}
	if sys := canon.SystemText(req.Messages); sys != "" {
		out.System = canon.RawJSON(sys)
	}
	// Anthropic's own tools first, as its documentation lists them.
	out.Tools = append(out.Tools, req.NativeTools["anthropic"]...)
	for _, t := range anthropicTools(req.Tools, req.Strict) {
		out.Tools = append(out.Tools, canon.RawJSON(t))
	}
	if c := anthropicContainer(req); c != "" {
		out.Container = canon.RawJSON(c)
	}
	var blocks []anBlock
	role := ""
	flush := func() {
		if len(blocks) > 0 {
			out.Messages = append(out.Messages, anMessage{Role: role, Content: canon.RawJSON(blocks)})
		}
		blocks = nil
	}
	for _, m := range req.Messages {
		r := "user"
		switch m.GetRole() {
		case toolfleetv1.Role_ROLE_SYSTEM:
			continue
		case toolfleetv1.Role_ROLE_ASSISTANT:
			r = "assistant"
		}
		if r != role {
			flush()
			role = r
		}
		blocks = append(blocks, anthropicBlocks(m)...)
	}
	flush()
	return json.Marshal(out)
}

func anthropicBlocks(m *toolfleetv1.Message) []anBlock {
	var out []anBlock
	for _, p := range m.GetParts() {
		switch k := p.GetKind().(type) {
		case *toolfleetv1.Part_Text:
			if k.Text != "" {
				out = append(out, anBlock{Type: "text", Text: &k.Text})
			}
		case *toolfleetv1.Part_Thinking:
			th := k.Thinking
			if th.GetText() == "" && len(th.GetSignature()) > 0 {
				out = append(out, anBlock{Type: "redacted_thinking", Data: string(th.GetSignature())})
				continue
			}
			text := th.GetText()
			out = append(out, anBlock{Type: "thinking", Thinking: &text, Signature: string(th.GetSignature())})
		case *toolfleetv1.Part_ToolCall:
			c := k.ToolCall
			b := anBlock{Type: "tool_use", ID: c.GetId(), Name: c.GetName(), Input: canon.CallArguments(c)}
			if cl := c.GetCaller(); cl != nil {
				b.Caller = &anCaller{Type: cl.GetType(), ToolID: cl.GetToolId()}
			}
			out = append(out, b)
		case *toolfleetv1.Part_ProviderBlock:
			if pb := k.ProviderBlock; pb.GetProvider() == "anthropic" && json.Valid(pb.GetJson()) {
				out = append(out, anBlock{Type: pb.GetType(), raw: pb.GetJson()})
			}
		case *toolfleetv1.Part_ToolResult:
			r := k.ToolResult
			out = append(out, anBlock{Type: "tool_result", ToolUseID: r.GetCallId(), Content: anthropicResultContent(r), IsError: r.GetIsError()})
		}
	}
	return out
}

// anthropicResultContent is a tool_result's content: the text, or, for a
// result that loads deferred tools, an array of an optional text block and
// one tool_reference block per tool.
func anthropicResultContent(r *toolfleetv1.ToolResult) json.RawMessage {
	refs := r.GetToolReferences()
	if len(refs) == 0 {
		return canon.RawJSON(canon.ResultText(r))
	}
	type block struct {
		Type     string `json:"type"`
		Text     string `json:"text,omitempty"`
		ToolName string `json:"tool_name,omitempty"`
	}
	var blocks []block
	if r.GetContent() != "" || r.GetStructured() != nil {
		blocks = append(blocks, block{Type: "text", Text: canon.ResultText(r)})
	}
	for _, name := range refs {
		blocks = append(blocks, block{Type: "tool_reference", ToolName: name})
	}
	return canon.RawJSON(blocks)
}

// ParseRequest implements Format.
func (Anthropic) ParseRequest(body []byte) (*llm.Request, error) {
	var in anRequest
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, malformed("anthropic request", err)
	}
	req := &llm.Request{Model: in.Model, MaxTokens: in.MaxTokens, Stream: in.Stream}
	var native []json.RawMessage
	var err error
	if req.Tools, native, req.Strict, err = anthropicDefs(in.Tools); err != nil {
		return nil, err
	}
	if len(native) > 0 {
		req.NativeTools = map[string][]json.RawMessage{"anthropic": native}
	}
	if len(in.Container) > 0 {
		var id string
		var obj anContainer
		switch {
		case json.Unmarshal(in.Container, &id) == nil:
			req.Container = id
		case json.Unmarshal(in.Container, &obj) == nil:
			req.Container = obj.ID
		default:
			return nil, malformed("anthropic request", errors.New("container is neither an id nor an object"))
		}
	}
	if c := in.ToolChoice; c != nil {
		switch c.Type {
		case "auto":
			req.ToolChoice.Mode = llm.ToolChoiceAuto
		case "none":
			req.ToolChoice.Mode = llm.ToolChoiceNone
		case "any":
			req.ToolChoice.Mode = llm.ToolChoiceRequired
		case "tool":
			req.ToolChoice = llm.ToolChoice{Mode: llm.ToolChoiceTool, Name: c.Name}
		}
		if c.DisableParallelToolUse != nil {
			parallel := !*c.DisableParallelToolUse
			req.ParallelToolCalls = &parallel
			if c.Type == "auto" {
				// "auto" was only the carrier of the parallel flag.
				req.ToolChoice.Mode = llm.ToolChoiceDefault
			}
		}
	}
	if len(in.System) > 0 {
		sys, err := anthropicText(in.System)
		if err != nil {
			return nil, err
		}
		req.Messages = append(req.Messages, llm.System(sys))
	}
	names := map[string]string{}
	for _, m := range in.Messages {
		blocks, err := anthropicContent(m.Content)
		if err != nil {
			return nil, err
		}
		if m.Role == "assistant" {
			msg, err := anthropicAssistant(blocks)
			if err != nil {
				return nil, err
			}
			for _, c := range llm.ToolCalls(msg) {
				names[c.GetId()] = c.GetName()
			}
			req.Messages = append(req.Messages, msg)
			continue
		}
		// A user message splits into a tool message (its results) and a user
		// message (its text), in that order.
		tool := &toolfleetv1.Message{Role: toolfleetv1.Role_ROLE_TOOL}
		user := &toolfleetv1.Message{Role: toolfleetv1.Role_ROLE_USER}
		for _, b := range blocks {
			switch b.Type {
			case "text":
				user.Parts = append(user.Parts, llm.Text(deref(b.Text)))
			case "tool_result":
				text, refs, err := anthropicResult(b.Content)
				if err != nil {
					return nil, err
				}
				p := llm.ResultPart(b.ToolUseID, names[b.ToolUseID], text, b.IsError)
				p.GetToolResult().ToolReferences = refs
				tool.Parts = append(tool.Parts, p)
			}
		}
		if len(tool.Parts) > 0 {
			req.Messages = append(req.Messages, tool)
		}
		if len(user.Parts) > 0 || len(tool.Parts) == 0 {
			req.Messages = append(req.Messages, user)
		}
	}
	return req, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// anthropicContent reads message content: a string or an array of blocks.
func anthropicContent(raw json.RawMessage) ([]anBlock, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []anBlock{{Type: "text", Text: &s}}, nil
	}
	var blocks []anBlock
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return nil, malformed("anthropic content", err)
	}
	return blocks, nil
}

// anthropicText reads a string or the text of an array of text blocks.
func anthropicText(raw json.RawMessage) (string, error) {
	if len(raw) == 0 {
		return "", nil
	}
	blocks, err := anthropicContent(raw)
	if err != nil {
		return "", err
	}
	var s string
	for _, b := range blocks {
		s += deref(b.Text)
	}
	return s, nil
}

// anthropicResult reads a tool_result's content: its text and the tools its
// tool_reference blocks load.
func anthropicResult(raw json.RawMessage) (string, []string, error) {
	if len(raw) == 0 {
		return "", nil, nil
	}
	blocks, err := anthropicContent(raw)
	if err != nil {
		return "", nil, err
	}
	var text string
	var refs []string
	for _, b := range blocks {
		if b.Type == "tool_reference" {
			var ref struct {
				ToolName string `json:"tool_name"`
			}
			if err := json.Unmarshal(b.raw, &ref); err != nil || ref.ToolName == "" {
				return "", nil, malformed("anthropic tool_result", errors.New("tool_reference without a tool_name"))
			}
			refs = append(refs, ref.ToolName)
			continue
		}
		text += deref(b.Text)
	}
	return text, refs, nil
}

func anthropicAssistant(blocks []anBlock) (*toolfleetv1.Message, error) {
	msg := &toolfleetv1.Message{Role: toolfleetv1.Role_ROLE_ASSISTANT}
	for _, b := range blocks {
		switch b.Type {
		case "text":
			msg.Parts = append(msg.Parts, llm.Text(deref(b.Text)))
		case "thinking":
			msg.Parts = append(msg.Parts, &toolfleetv1.Part{Kind: &toolfleetv1.Part_Thinking{Thinking: &toolfleetv1.Thinking{Text: deref(b.Thinking), Signature: []byte(b.Signature)}}})
		case "redacted_thinking":
			msg.Parts = append(msg.Parts, &toolfleetv1.Part{Kind: &toolfleetv1.Part_Thinking{Thinking: &toolfleetv1.Thinking{Signature: []byte(b.Data)}}})
		case "tool_use":
			args, err := llm.DecodeArguments(b.Name+" ("+b.ID+")", b.Input)
			if err != nil {
				return nil, err
			}
			call := &toolfleetv1.ToolCall{Id: b.ID, Name: b.Name, Arguments: args}
			if b.Caller != nil && b.Caller.Type != "" && b.Caller.Type != "direct" {
				call.Caller = &toolfleetv1.ToolCaller{Type: b.Caller.Type, ToolId: b.Caller.ToolID}
			}
			msg.Parts = append(msg.Parts, &toolfleetv1.Part{Kind: &toolfleetv1.Part_ToolCall{ToolCall: call}})
		default:
			if !anthropicParsed(b.Type) && b.raw != nil {
				msg.Parts = append(msg.Parts, providerBlockPart("anthropic", b.Type, b.raw))
			}
		}
	}
	return msg, nil
}

func anthropicStop(reason string) string {
	switch reason {
	case "end_turn", "stop_sequence", "":
		return llm.StopEndTurn
	case "pause_turn":
		return llm.StopPaused
	case "tool_use":
		return llm.StopToolCalls
	case "max_tokens", "model_context_window_exceeded":
		return llm.StopMaxTokens
	case "refusal":
		return llm.StopContentFilter
	}
	return reason
}

func anthropicStopReason(stop string) string {
	switch stop {
	case llm.StopToolCalls:
		return "tool_use"
	case llm.StopMaxTokens:
		return "max_tokens"
	case llm.StopContentFilter:
		return "refusal"
	case llm.StopPaused:
		return "pause_turn"
	}
	return "end_turn"
}

// RenderResponse implements Format.
func (Anthropic) RenderResponse(msg *toolfleetv1.Message) ([]byte, error) {
	stop := anthropicStopReason(msg.GetStopReason())
	resp := anResponse{ID: "msg_toolfleet", Type: "message", Role: "assistant", Model: msg.GetModel(), Content: anthropicBlocks(msg), StopReason: &stop, Usage: &anUsage{}}
	if resp.Content == nil {
		resp.Content = []anBlock{}
	}
	if u := msg.GetUsage(); u != nil {
		resp.Usage = &anUsage{InputTokens: u.GetInputTokens(), OutputTokens: u.GetOutputTokens(), CacheReadInputTokens: u.GetCacheReadTokens(), CacheCreationInputTokens: u.GetCacheWriteTokens()}
	}
	if msg.GetContainer() != "" {
		resp.Container = &anContainer{ID: msg.GetContainer()}
	}
	return json.Marshal(resp)
}

// ParseResponse implements Format.
func (Anthropic) ParseResponse(body []byte) (*toolfleetv1.Message, error) {
	var resp anResponse
	if err := json.Unmarshal(body, &resp); err != nil {
		return nil, malformed("anthropic response", err)
	}
	if resp.Type == "error" {
		var e anErrorBody
		if err := json.Unmarshal(body, &e); err != nil || e.Error == nil {
			return nil, malformed("anthropic response", errors.New("error body without an error object"))
		}
		return nil, llm.NewStreamError("anthropic", e.Error.Type, e.Error.Message)
	}
	msg, err := anthropicAssistant(resp.Content)
	if err != nil {
		return nil, err
	}
	msg.Model = resp.Model
	msg.Usage = resp.Usage.canonical()
	if resp.Container != nil {
		msg.Container = resp.Container.ID
	}
	if resp.StopReason != nil {
		msg.StopReason = anthropicStop(*resp.StopReason)
	}
	return msg, nil
}

// anthropicContainer is the container to send: the request's, else the one
// the latest assistant turn ran in.
func anthropicContainer(req *llm.Request) string {
	if req.Container != "" {
		return req.Container
	}
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if m := req.Messages[i]; m.GetRole() == toolfleetv1.Role_ROLE_ASSISTANT {
			return m.GetContainer()
		}
	}
	return ""
}
