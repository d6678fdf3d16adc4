package wire

import (
	"encoding/json"
	"errors"
	"fmt"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/internal/canon"
)

// OpenAIChat is the OpenAI Chat Completions format (also spoken by Ollama,
// vLLM and most OpenAI-compatible servers). Arguments travel as a JSON
// string; tool results are role "tool" messages with tool_call_id. The
// format has no is_error flag and no thinking blocks: on render a failed
// result is sent as its content and thinking parts are left out; on parse,
// vLLM/DeepSeek-style reasoning_content becomes a thinking part.
//
// Custom tools (free-text input, optionally a Lark or regex grammar) are
// definitions with an input_format, and their "custom" tool calls calls
// with ToolCall.input; streamed chunks carry function calls only.
type OpenAIChat struct{}

// Name implements Format.
func (OpenAIChat) Name() string { return "openai" }

type oaTool struct {
	Type     string     `json:"type"`
	Function oaFunction `json:"function,omitzero"`
	// Custom is a custom tool (type "custom").
	Custom *oaCustomTool `json:"custom,omitempty"`
}

type oaCustomTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Format      *oaCustomFormat `json:"format,omitempty"`
}

// oaCustomFormat is {"type": "text"} or {"type": "grammar", "grammar":
// {"definition": …, "syntax": "lark"|"regex"}}.
type oaCustomFormat struct {
	Type    string `json:"type"`
	Grammar *struct {
		Definition string `json:"definition"`
		Syntax     string `json:"syntax"`
	} `json:"grammar,omitempty"`
}

type oaFunction struct {
	Name        string         `json:"name"`
	Description string         `json:"description,omitempty"`
	Parameters  map[string]any `json:"parameters,omitempty"`
	Strict      bool           `json:"strict,omitempty"`
}

type oaChatRequest struct {
	Model               string          `json:"model,omitempty"`
	Messages            []oaChatMessage `json:"messages"`
	Tools               []oaTool        `json:"tools,omitempty"`
	ToolChoice          json.RawMessage `json:"tool_choice,omitempty"`
	ParallelToolCalls   *bool           `json:"parallel_tool_calls,omitempty"`
	MaxCompletionTokens int             `json:"max_completion_tokens,omitempty"`
	Stream              bool            `json:"stream,omitempty"`
	StreamOptions       *oaStreamOpts   `json:"stream_options,omitempty"`
}

type oaStreamOpts struct {
	IncludeUsage bool `json:"include_usage"`
}

type oaChatMessage struct {
	Role             string          `json:"role"`
	Content          json.RawMessage `json:"content,omitempty"`
	ReasoningContent string          `json:"reasoning_content,omitempty"`
	ToolCalls        []oaToolCall    `json:"tool_calls,omitempty"`
	ToolCallID       string          `json:"tool_call_id,omitempty"`
	Refusal          string          `json:"refusal,omitempty"`
}

type oaToolCall struct {
	Index    *int           `json:"index,omitempty"`
	ID       string         `json:"id,omitempty"`
	Type     string         `json:"type,omitempty"`
	Function oaCallFunction `json:"function,omitzero"`
	// Custom is a custom tool call's name and free-text input.
	Custom *oaCustomCall `json:"custom,omitempty"`
}

type oaCustomCall struct {
	Name  string `json:"name"`
	Input string `json:"input"`
}

type oaCallFunction struct {
	Name      string          `json:"name,omitempty"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

type oaUsage struct {
	PromptTokens        int64 `json:"prompt_tokens"`
	CompletionTokens    int64 `json:"completion_tokens"`
	TotalTokens         int64 `json:"total_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details,omitempty"`
}

type oaChatResponse struct {
	ID      string         `json:"id"`
	Object  string         `json:"object"`
	Created int64          `json:"created"`
	Model   string         `json:"model"`
	Choices []oaChatChoice `json:"choices"`
	Usage   *oaUsage       `json:"usage,omitempty"`
	// Error is set on an error body, or on a chunk that ends a stream early.
	Error *providerError `json:"error,omitempty"`
}

type oaChatChoice struct {
	Index        int            `json:"index"`
	Message      *oaChatMessage `json:"message,omitempty"`
	Delta        *oaChatMessage `json:"delta,omitempty"`
	FinishReason *string        `json:"finish_reason"`
}

// RenderTools implements Format.
func (OpenAIChat) RenderTools(tools []*toolfleetv1.ToolDefinition, strict bool) ([]byte, error) {
	return json.Marshal(openAIChatTools(tools, strict))
}

func openAIChatTools(tools []*toolfleetv1.ToolDefinition, strict bool) []oaTool {
	out := make([]oaTool, 0, len(tools))
	for _, d := range tools {
		if f := d.GetInputFormat(); f != nil {
			ct := &oaCustomTool{Name: d.GetModelName(), Description: d.GetDescription(), Format: &oaCustomFormat{Type: f.GetType()}}
			if f.GetType() == "grammar" {
				ct.Format.Grammar = &struct {
					Definition string `json:"definition"`
					Syntax     string `json:"syntax"`
				}{f.GetDefinition(), f.GetSyntax()}
			}
			out = append(out, oaTool{Type: "custom", Custom: ct})
			continue
		}
		schema := canon.SchemaOf(d)
		if strict {
			schema = OpenAIStrictSchema(schema)
		}
		out = append(out, oaTool{Type: "function", Function: oaFunction{Name: d.GetModelName(), Description: d.GetDescription(), Parameters: schema, Strict: strict}})
	}
	return out
}

// ParseTools implements Format.
func (OpenAIChat) ParseTools(body []byte) ([]*toolfleetv1.ToolDefinition, error) {
	var tools []oaTool
	if err := json.Unmarshal(body, &tools); err != nil {
		return nil, malformed("openai tools", err)
	}
	return openAIChatDefs(tools)
}

func openAIChatDefs(tools []oaTool) ([]*toolfleetv1.ToolDefinition, error) {
	var defs []*toolfleetv1.ToolDefinition
	for _, t := range tools {
		if t.Type == "custom" {
			if t.Custom == nil {
				return nil, malformed("openai tools", errors.New("a custom tool without its custom object"))
			}
			d := &toolfleetv1.ToolDefinition{ModelName: t.Custom.Name, Description: t.Custom.Description, InputFormat: inputFormatFromWire("", "", "")}
			if f := t.Custom.Format; f != nil {
				d.InputFormat = inputFormatFromWire(f.Type, "", "")
				if f.Grammar != nil {
					d.InputFormat = inputFormatFromWire(f.Type, f.Grammar.Syntax, f.Grammar.Definition)
				}
			}
			defs = append(defs, d)
			continue
		}
		d, err := defFromWire(t.Function.Name, t.Function.Description, t.Function.Parameters)
		if err != nil {
			return nil, err
		}
		defs = append(defs, d)
	}
	return defs, nil
}

func openAIToolChoice(c llm.ToolChoice, nested bool) json.RawMessage {
	switch c.Mode {
	case llm.ToolChoiceAuto:
		return canon.RawJSON("auto")
	case llm.ToolChoiceNone:
		return canon.RawJSON("none")
	case llm.ToolChoiceRequired:
		return canon.RawJSON("required")
	case llm.ToolChoiceTool:
		if nested {
			return canon.RawJSON(map[string]any{"type": "function", "function": map[string]any{"name": c.Name}})
		}
		return canon.RawJSON(map[string]any{"type": "function", "name": c.Name})
	}
	return nil
}

func parseOpenAIToolChoice(raw json.RawMessage) (llm.ToolChoice, error) {
	if len(raw) == 0 {
		return llm.ToolChoice{}, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		switch s {
		case "auto":
			return llm.ToolChoice{Mode: llm.ToolChoiceAuto}, nil
		case "none":
			return llm.ToolChoice{Mode: llm.ToolChoiceNone}, nil
		case "required":
			return llm.ToolChoice{Mode: llm.ToolChoiceRequired}, nil
		}
		return llm.ToolChoice{}, fmt.Errorf("unknown tool_choice %q", s)
	}
	var obj struct {
		Name     string `json:"name"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
		Custom struct {
			Name string `json:"name"`
		} `json:"custom"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return llm.ToolChoice{}, err
	}
	name := obj.Function.Name
	if name == "" {
		name = obj.Custom.Name
	}
	if name == "" {
		name = obj.Name
	}
	return llm.ToolChoice{Mode: llm.ToolChoiceTool, Name: name}, nil
}

// RenderRequest implements Format.
func (f OpenAIChat) RenderRequest(req *llm.Request) ([]byte, error) {
	out := oaChatRequest{
		Model:               req.Model,
		Messages:            []oaChatMessage{},
		ToolChoice:          openAIToolChoice(req.ToolChoice, true),
		MaxCompletionTokens: req.MaxTokens,
		Stream:              req.Stream,
	}
	for _, d := range req.Tools {
		if req.ToolChoice.Mode == llm.ToolChoiceTool && d.GetModelName() == req.ToolChoice.Name && d.GetInputFormat() != nil {
			out.ToolChoice = canon.RawJSON(map[string]any{"type": "custom", "custom": map[string]any{"name": d.GetModelName()}})
		}
	}
	if len(req.Tools) > 0 {
		out.Tools = openAIChatTools(req.Tools, req.Strict)
		out.ParallelToolCalls = req.ParallelToolCalls
	}
	if req.Stream {
		out.StreamOptions = &oaStreamOpts{IncludeUsage: true}
	}
	for _, m := range req.Messages {
		msgs, err := openAIChatMessages(m)
		if err != nil {
			return nil, err
		}
		out.Messages = append(out.Messages, msgs...)
	}
	return json.Marshal(out)
}

func openAIChatMessages(m *toolfleetv1.Message) ([]oaChatMessage, error) {
	var out []oaChatMessage
	switch m.GetRole() {
	case toolfleetv1.Role_ROLE_SYSTEM:
		return []oaChatMessage{{Role: "system", Content: canon.RawJSON(llm.MessageText(m))}}, nil
	case toolfleetv1.Role_ROLE_ASSISTANT:
		msg := oaChatMessage{Role: "assistant"}
		if text := llm.MessageText(m); text != "" {
			msg.Content = canon.RawJSON(text)
		}
		for _, c := range llm.ToolCalls(m) {
			if c.Input != nil {
				msg.ToolCalls = append(msg.ToolCalls, oaToolCall{ID: c.GetId(), Type: "custom", Custom: &oaCustomCall{Name: c.GetName(), Input: c.GetInput()}})
				continue
			}
			msg.ToolCalls = append(msg.ToolCalls, oaToolCall{ID: c.GetId(), Type: "function", Function: oaCallFunction{Name: c.GetName(), Arguments: canon.RawJSON(string(canon.CallArguments(c)))}})
		}
		if msg.Content == nil && msg.ToolCalls == nil {
			msg.Content = canon.RawJSON("")
		}
		return []oaChatMessage{msg}, nil
	}
	// User and tool messages: results become "tool" messages, text a user message.
	var text string
	for _, p := range m.GetParts() {
		if r := p.GetToolResult(); r != nil {
			out = append(out, oaChatMessage{Role: "tool", ToolCallID: r.GetCallId(), Content: canon.RawJSON(canon.ResultText(r))})
		}
		text += p.GetText()
	}
	if text != "" || len(out) == 0 {
		out = append(out, oaChatMessage{Role: "user", Content: canon.RawJSON(text)})
	}
	return out, nil
}

// contentText reads OpenAI content: a string, null, or an array of parts.
func contentText(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", err
	}
	for _, p := range parts {
		s += p.Text
	}
	return s, nil
}

// ParseRequest implements Format.
func (OpenAIChat) ParseRequest(body []byte) (*llm.Request, error) {
	var in oaChatRequest
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, malformed("openai request", err)
	}
	req := &llm.Request{Model: in.Model, ParallelToolCalls: in.ParallelToolCalls, MaxTokens: in.MaxCompletionTokens, Stream: in.Stream}
	var err error
	if req.Tools, err = openAIChatDefs(in.Tools); err != nil {
		return nil, err
	}
	for _, t := range in.Tools {
		req.Strict = req.Strict || t.Function.Strict
	}
	if req.ToolChoice, err = parseOpenAIToolChoice(in.ToolChoice); err != nil {
		return nil, malformed("openai tool_choice", err)
	}
	names := map[string]string{}
	var pending *toolfleetv1.Message // consecutive tool messages form one canonical tool message
	for _, m := range in.Messages {
		text, err := contentText(m.Content)
		if err != nil {
			return nil, malformed("openai message content", err)
		}
		if m.Role != "tool" {
			pending = nil
		}
		switch m.Role {
		case "system", "developer":
			req.Messages = append(req.Messages, llm.System(text))
		case "user":
			req.Messages = append(req.Messages, llm.User(text))
		case "assistant":
			msg := &toolfleetv1.Message{Role: toolfleetv1.Role_ROLE_ASSISTANT}
			if text != "" {
				msg.Parts = append(msg.Parts, llm.Text(text))
			}
			for _, c := range m.ToolCalls {
				call, err := openAIChatCall(c)
				if err != nil {
					return nil, err
				}
				names[call.GetId()] = call.GetName()
				msg.Parts = append(msg.Parts, &toolfleetv1.Part{Kind: &toolfleetv1.Part_ToolCall{ToolCall: call}})
			}
			req.Messages = append(req.Messages, msg)
		case "tool":
			if pending == nil {
				pending = &toolfleetv1.Message{Role: toolfleetv1.Role_ROLE_TOOL}
				req.Messages = append(req.Messages, pending)
			}
			pending.Parts = append(pending.Parts, llm.ResultPart(m.ToolCallID, names[m.ToolCallID], text, false))
		default:
			return nil, malformed("openai request", fmt.Errorf("unknown role %q", m.Role))
		}
	}
	return req, nil
}

func openAIChatCall(c oaToolCall) (*toolfleetv1.ToolCall, error) {
	if c.Type == "custom" {
		if c.Custom == nil {
			return nil, malformed("openai", fmt.Errorf("custom tool call %s without its custom object", c.ID))
		}
		input := c.Custom.Input
		return &toolfleetv1.ToolCall{Id: c.ID, Name: c.Custom.Name, Input: &input}, nil
	}
	args, err := llm.DecodeArguments(c.Function.Name+" ("+c.ID+")", c.Function.Arguments)
	if err != nil {
		return nil, err
	}
	return &toolfleetv1.ToolCall{Id: c.ID, Name: c.Function.Name, Arguments: args}, nil
}

func openAIStop(reason string) string {
	switch reason {
	case "stop", "":
		return llm.StopEndTurn
	case "tool_calls", "function_call":
		return llm.StopToolCalls
	case "length":
		return llm.StopMaxTokens
	case "content_filter":
		return llm.StopContentFilter
	}
	return reason
}

func openAIFinish(stop string) string {
	switch stop {
	case llm.StopToolCalls:
		return "tool_calls"
	case llm.StopMaxTokens:
		return "length"
	case llm.StopContentFilter:
		return "content_filter"
	}
	return "stop"
}

func (u *oaUsage) canonical() *toolfleetv1.Usage {
	if u == nil {
		return nil
	}
	out := &toolfleetv1.Usage{InputTokens: u.PromptTokens, OutputTokens: u.CompletionTokens}
	if u.PromptTokensDetails != nil {
		out.CacheReadTokens = u.PromptTokensDetails.CachedTokens
	}
	return out
}

// RenderResponse implements Format.
func (OpenAIChat) RenderResponse(msg *toolfleetv1.Message) ([]byte, error) {
	msgs, err := openAIChatMessages(msg)
	if err != nil {
		return nil, err
	}
	m := msgs[0]
	if m.Content == nil {
		m.Content = json.RawMessage("null")
	}
	finish := openAIFinish(msg.GetStopReason())
	resp := oaChatResponse{ID: "chatcmpl-toolfleet", Object: "chat.completion", Model: msg.GetModel(), Choices: []oaChatChoice{{Message: &m, FinishReason: &finish}}}
	if u := msg.GetUsage(); u != nil {
		resp.Usage = &oaUsage{PromptTokens: u.GetInputTokens(), CompletionTokens: u.GetOutputTokens(), TotalTokens: u.GetInputTokens() + u.GetOutputTokens()}
		if u.GetCacheReadTokens() > 0 {
			resp.Usage.PromptTokensDetails = &struct {
				CachedTokens int64 `json:"cached_tokens"`
			}{u.GetCacheReadTokens()}
		}
	}
	return json.Marshal(resp)
}

// ParseResponse implements Format. Only the first choice is read.
func (OpenAIChat) ParseResponse(body []byte) (*toolfleetv1.Message, error) {
	var resp oaChatResponse
	if err := json.Unmarshal(body, &resp); err != nil {
		return nil, malformed("openai response", err)
	}
	if resp.Error != nil && len(resp.Choices) == 0 {
		return nil, resp.Error.apiError("openai")
	}
	if len(resp.Choices) == 0 || resp.Choices[0].Message == nil {
		return nil, malformed("openai response", errors.New("no choices"))
	}
	c := resp.Choices[0]
	msg := &toolfleetv1.Message{Role: toolfleetv1.Role_ROLE_ASSISTANT, Model: resp.Model, Usage: resp.Usage.canonical()}
	if c.FinishReason != nil {
		msg.StopReason = openAIStop(*c.FinishReason)
	}
	if c.Message.ReasoningContent != "" {
		msg.Parts = append(msg.Parts, &toolfleetv1.Part{Kind: &toolfleetv1.Part_Thinking{Thinking: &toolfleetv1.Thinking{Text: c.Message.ReasoningContent}}})
	}
	text, err := contentText(c.Message.Content)
	if err != nil {
		return nil, malformed("openai response content", err)
	}
	if text == "" {
		text = c.Message.Refusal
	}
	if text != "" {
		msg.Parts = append(msg.Parts, llm.Text(text))
	}
	for _, tc := range c.Message.ToolCalls {
		call, err := openAIChatCall(tc)
		if err != nil {
			return nil, err
		}
		msg.Parts = append(msg.Parts, &toolfleetv1.Part{Kind: &toolfleetv1.Part_ToolCall{ToolCall: call}})
	}
	return msg, nil
}

// NewStreamDecoder implements Format.
func (OpenAIChat) NewStreamDecoder() StreamDecoder { return &openAIChatStream{} }

type openAIChatStream struct{ asm llm.Assembler }

func (s *openAIChatStream) Decode(_ string, data []byte) ([]llm.Delta, error) {
	if string(data) == "[DONE]" {
		return nil, nil
	}
	var chunk oaChatResponse
	if err := json.Unmarshal(data, &chunk); err != nil {
		return nil, malformed("openai stream chunk", err)
	}
	if chunk.Error != nil {
		return nil, chunk.Error.apiError("openai")
	}
	var out []llm.Delta
	if chunk.Model != "" {
		out = append(out, llm.Delta{Model: chunk.Model})
	}
	for _, c := range chunk.Choices {
		if c.Index != 0 || c.Delta == nil && c.FinishReason == nil {
			continue
		}
		if d := c.Delta; d != nil {
			if d.ReasoningContent != "" {
				out = append(out, llm.Delta{Thinking: d.ReasoningContent})
			}
			if text, err := contentText(d.Content); err != nil {
				return nil, malformed("openai stream content", err)
			} else if text != "" {
				out = append(out, llm.Delta{Text: text})
			}
			for _, tc := range d.ToolCalls {
				idx := -1
				if tc.Index != nil {
					idx = *tc.Index
				}
				args, err := argumentFragment(tc.Function.Arguments)
				if err != nil {
					return nil, malformed("openai stream arguments", err)
				}
				out = append(out, llm.Delta{ToolCall: &llm.ToolCallDelta{Index: idx, ID: tc.ID, Name: tc.Function.Name, Arguments: args}})
			}
		}
		if c.FinishReason != nil && *c.FinishReason != "" {
			out = append(out, llm.Delta{StopReason: openAIStop(*c.FinishReason)})
		}
	}
	if u := chunk.Usage.canonical(); u != nil {
		out = append(out, llm.Delta{Usage: u})
	}
	for _, d := range out {
		s.asm.Add(d)
	}
	return out, nil
}

func (s *openAIChatStream) Message() (*toolfleetv1.Message, error) { return s.asm.Message() }

// argumentFragment reads a streamed arguments fragment: normally a JSON
// string, but some servers send the object itself.
func argumentFragment(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	if raw[0] == '"' {
		var s string
		err := json.Unmarshal(raw, &s)
		return s, err
	}
	return string(raw), nil
}
