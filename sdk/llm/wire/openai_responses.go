package wire

import (
	"bytes"
	"encoding/json"
	"fmt"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/internal/canon"
)

// OpenAIResponses is the OpenAI Responses format: the conversation is a list
// of input items; calls are function_call items and results
// function_call_output items, joined by call_id. Reasoning items carry their
// encrypted_content in Thinking.signature so they can be sent back. There is
// no is_error flag: failed results are sent as their content.
//
// Custom tools (free-text input, optionally constrained by a Lark or regex
// grammar) are definitions with an input_format; their custom_tool_call
// items are calls with ToolCall.input and their custom_tool_call_output
// items ordinary results. Tools of other types (tool_search, web_search, …)
// are kept verbatim in Request.NativeTools["openai-responses"], and output
// items toolfleet does not interpret (tool_search_call, tool_search_output,
// web_search_call, …) as provider blocks, sent back in place.
type OpenAIResponses struct{}

// responsesName is the format name, also the provider of its carried items.
const responsesName = "openai-responses"

// Name implements Format.
func (OpenAIResponses) Name() string { return "openai-responses" }

type orTool struct {
	Type        string         `json:"type"`
	Name        string         `json:"name"`
	Description string         `json:"description,omitempty"`
	Parameters  map[string]any `json:"parameters,omitempty"`
	Strict      *bool          `json:"strict,omitempty"`
	// DeferLoading leaves the tool out of the context until tool_search loads it.
	DeferLoading bool `json:"defer_loading,omitempty"`
	// Format is a custom tool's input format.
	Format *orFormat `json:"format,omitempty"`
}

// orFormat is a custom tool's input format: {"type": "text"} or
// {"type": "grammar", "syntax": "lark"|"regex", "definition": …}.
type orFormat struct {
	Type       string `json:"type"`
	Syntax     string `json:"syntax,omitempty"`
	Definition string `json:"definition,omitempty"`
}

type orRequest struct {
	Model             string            `json:"model,omitempty"`
	Instructions      string            `json:"instructions,omitempty"`
	Input             []orItem          `json:"input"`
	Tools             []json.RawMessage `json:"tools,omitempty"`
	ToolChoice        json.RawMessage   `json:"tool_choice,omitempty"`
	ParallelToolCalls *bool             `json:"parallel_tool_calls,omitempty"`
	MaxOutputTokens   int               `json:"max_output_tokens,omitempty"`
	Stream            bool              `json:"stream,omitempty"`
	Include           []string          `json:"include,omitempty"`
}

type orItem struct {
	Type             string          `json:"type,omitempty"`
	ID               string          `json:"id,omitempty"`
	Role             string          `json:"role,omitempty"`
	Content          json.RawMessage `json:"content,omitempty"`
	CallID           string          `json:"call_id,omitempty"`
	Name             string          `json:"name,omitempty"`
	Arguments        json.RawMessage `json:"arguments,omitempty"`
	Output           json.RawMessage `json:"output,omitempty"`
	Status           string          `json:"status,omitempty"`
	Summary          []orSummary     `json:"summary,omitempty"`
	EncryptedContent string          `json:"encrypted_content,omitempty"`
	// Input is a custom_tool_call's free-text input.
	Input *string `json:"input,omitempty"`

	// raw is the item as received, for item types toolfleet carries
	// without interpreting; when set it is also what MarshalJSON writes.
	raw json.RawMessage
}

// MarshalJSON writes a carried item verbatim.
func (it orItem) MarshalJSON() ([]byte, error) {
	if it.raw != nil {
		return it.raw, nil
	}
	type plain orItem
	return json.Marshal(plain(it))
}

// UnmarshalJSON keeps the raw item next to the decoded fields.
func (it *orItem) UnmarshalJSON(data []byte) error {
	type plain orItem
	var p plain
	if err := json.Unmarshal(data, &p); err != nil {
		return err
	}
	*it = orItem(p)
	it.raw = bytes.Clone(data)
	return nil
}

// responsesParsed reports the item types toolfleet parses itself; every
// other item becomes a ProviderBlock.
func responsesParsed(typ string) bool {
	switch typ {
	case "", "message", "reasoning", "function_call", "function_call_output", "custom_tool_call", "custom_tool_call_output":
		return true
	}
	return false
}

type orSummary struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type orResponse struct {
	ID     string   `json:"id"`
	Object string   `json:"object"`
	Model  string   `json:"model"`
	Status string   `json:"status"`
	Output []orItem `json:"output"`
	// Error says why a response failed (status "failed").
	Error             *providerError `json:"error,omitempty"`
	IncompleteDetails *struct {
		Reason string `json:"reason"`
	} `json:"incomplete_details,omitempty"`
	Usage *struct {
		InputTokens        int64 `json:"input_tokens"`
		OutputTokens       int64 `json:"output_tokens"`
		TotalTokens        int64 `json:"total_tokens"`
		InputTokensDetails *struct {
			CachedTokens int64 `json:"cached_tokens"`
		} `json:"input_tokens_details,omitempty"`
	} `json:"usage,omitempty"`
}

// RenderRequest implements Format. System messages become instructions.
func (OpenAIResponses) RenderRequest(req *llm.Request) ([]byte, error) {
	out := orRequest{
		Model:           req.Model,
		Instructions:    canon.SystemText(req.Messages),
		Input:           []orItem{},
		ToolChoice:      openAIToolChoice(req.ToolChoice, false),
		MaxOutputTokens: req.MaxTokens,
		Stream:          req.Stream,
	}
	for _, d := range req.Tools {
		if req.ToolChoice.Mode == llm.ToolChoiceTool && d.GetModelName() == req.ToolChoice.Name && d.GetInputFormat() != nil {
			out.ToolChoice = canon.RawJSON(map[string]string{"type": "custom", "name": d.GetModelName()})
		}
	}
	for _, t := range responsesTools(req.Tools, req.Strict) {
		out.Tools = append(out.Tools, canon.RawJSON(t))
	}
	// OpenAI's own tools (tool_search, …) after the definitions.
	out.Tools = append(out.Tools, req.NativeTools[responsesName]...)
	if len(out.Tools) > 0 {
		out.ParallelToolCalls = req.ParallelToolCalls
	}
	custom := customCalls(req.Messages)
	for _, m := range req.Messages {
		if m.GetRole() == toolfleetv1.Role_ROLE_SYSTEM {
			continue
		}
		out.Input = append(out.Input, responsesItems(m, custom)...)
	}
	for _, it := range out.Input {
		if it.Type == "reasoning" {
			// Reasoning must round-trip encrypted when the response is not stored.
			out.Include = []string{"reasoning.encrypted_content"}
			break
		}
	}
	return json.Marshal(out)
}

// customCalls are the ids of the free-text calls in msgs: their results are
// custom_tool_call_output items.
func customCalls(msgs []*toolfleetv1.Message) map[string]bool {
	ids := map[string]bool{}
	for _, m := range msgs {
		for _, c := range llm.ToolCalls(m) {
			if c.Input != nil {
				ids[c.GetId()] = true
			}
		}
	}
	return ids
}

func responsesItems(m *toolfleetv1.Message, custom map[string]bool) []orItem {
	var out []orItem
	role := "user"
	textType := "input_text"
	if m.GetRole() == toolfleetv1.Role_ROLE_ASSISTANT {
		role, textType = "assistant", "output_text"
	}
	var text string
	flush := func() {
		if text == "" {
			return
		}
		out = append(out, orItem{Type: "message", Role: role, Content: canon.RawJSON([]orSummary{{Type: textType, Text: text}})})
		text = ""
	}
	for _, p := range m.GetParts() {
		switch k := p.GetKind().(type) {
		case *toolfleetv1.Part_Text:
			text += k.Text
		case *toolfleetv1.Part_Thinking:
			flush()
			it := orItem{Type: "reasoning", Summary: []orSummary{}}
			if k.Thinking.GetText() != "" {
				it.Summary = append(it.Summary, orSummary{Type: "summary_text", Text: k.Thinking.GetText()})
			}
			if sig := k.Thinking.GetSignature(); len(sig) > 0 {
				it.EncryptedContent = string(sig)
			}
			out = append(out, it)
		case *toolfleetv1.Part_ToolCall:
			flush()
			c := k.ToolCall
			if c.Input != nil {
				input := c.GetInput()
				out = append(out, orItem{Type: "custom_tool_call", CallID: c.GetId(), Name: c.GetName(), Input: &input})
				continue
			}
			out = append(out, orItem{Type: "function_call", CallID: c.GetId(), Name: c.GetName(), Arguments: canon.RawJSON(string(canon.CallArguments(c)))})
		case *toolfleetv1.Part_ToolResult:
			flush()
			typ := "function_call_output"
			if custom[k.ToolResult.GetCallId()] {
				typ = "custom_tool_call_output"
			}
			out = append(out, orItem{Type: typ, CallID: k.ToolResult.GetCallId(), Output: canon.RawJSON(canon.ResultText(k.ToolResult))})
		case *toolfleetv1.Part_ProviderBlock:
			if pb := k.ProviderBlock; pb.GetProvider() == responsesName && json.Valid(pb.GetJson()) {
				flush()
				out = append(out, orItem{Type: pb.GetType(), raw: pb.GetJson()})
			}
		}
	}
	flush()
	return out
}

// ParseRequest implements Format.
func (OpenAIResponses) ParseRequest(body []byte) (*llm.Request, error) {
	var in orRequest
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, malformed("openai-responses request", err)
	}
	req := &llm.Request{Model: in.Model, ParallelToolCalls: in.ParallelToolCalls, MaxTokens: in.MaxOutputTokens, Stream: in.Stream}
	var native []json.RawMessage
	var err error
	if req.Tools, native, req.Strict, err = responsesDefs(in.Tools); err != nil {
		return nil, err
	}
	if len(native) > 0 {
		req.NativeTools = map[string][]json.RawMessage{responsesName: native}
	}
	if req.ToolChoice, err = parseOpenAIToolChoice(in.ToolChoice); err != nil {
		return nil, malformed("openai-responses tool_choice", err)
	}
	if in.Instructions != "" {
		req.Messages = append(req.Messages, llm.System(in.Instructions))
	}
	msgs, err := responsesMessages(in.Input)
	if err != nil {
		return nil, err
	}
	req.Messages = append(req.Messages, msgs...)
	return req, nil
}

// responsesMessages groups items into canonical messages: consecutive
// assistant-side items (text, reasoning, calls) form one assistant message,
// consecutive outputs one tool message.
func responsesMessages(items []orItem) ([]*toolfleetv1.Message, error) {
	var out []*toolfleetv1.Message
	names := map[string]string{}
	var cur *toolfleetv1.Message
	into := func(role toolfleetv1.Role) *toolfleetv1.Message {
		if cur == nil || cur.Role != role || role == toolfleetv1.Role_ROLE_USER || role == toolfleetv1.Role_ROLE_SYSTEM {
			cur = &toolfleetv1.Message{Role: role}
			out = append(out, cur)
		}
		return cur
	}
	for _, it := range items {
		typ := it.Type
		if typ == "" && it.Role != "" {
			typ = "message"
		}
		switch typ {
		case "message":
			text, err := responsesText(it.Content)
			if err != nil {
				return nil, err
			}
			role := map[string]toolfleetv1.Role{"user": toolfleetv1.Role_ROLE_USER, "assistant": toolfleetv1.Role_ROLE_ASSISTANT, "system": toolfleetv1.Role_ROLE_SYSTEM, "developer": toolfleetv1.Role_ROLE_SYSTEM}[it.Role]
			if role == toolfleetv1.Role_ROLE_UNSPECIFIED {
				return nil, malformed("openai-responses", fmt.Errorf("unknown role %q", it.Role))
			}
			m := into(role)
			m.Parts = append(m.Parts, llm.Text(text))
		case "reasoning":
			th := &toolfleetv1.Thinking{}
			for _, s := range it.Summary {
				th.Text += s.Text
			}
			if it.EncryptedContent != "" {
				th.Signature = []byte(it.EncryptedContent)
			}
			m := into(toolfleetv1.Role_ROLE_ASSISTANT)
			m.Parts = append(m.Parts, &toolfleetv1.Part{Kind: &toolfleetv1.Part_Thinking{Thinking: th}})
		case "function_call":
			args, err := llm.DecodeArguments(it.Name+" ("+it.CallID+")", it.Arguments)
			if err != nil {
				return nil, err
			}
			names[it.CallID] = it.Name
			m := into(toolfleetv1.Role_ROLE_ASSISTANT)
			m.Parts = append(m.Parts, &toolfleetv1.Part{Kind: &toolfleetv1.Part_ToolCall{ToolCall: &toolfleetv1.ToolCall{Id: it.CallID, Name: it.Name, Arguments: args}}})
		case "custom_tool_call":
			if it.Input == nil {
				return nil, malformed("openai-responses", fmt.Errorf("custom_tool_call %s (%s) without input", it.Name, it.CallID))
			}
			input := *it.Input
			names[it.CallID] = it.Name
			m := into(toolfleetv1.Role_ROLE_ASSISTANT)
			m.Parts = append(m.Parts, &toolfleetv1.Part{Kind: &toolfleetv1.Part_ToolCall{ToolCall: &toolfleetv1.ToolCall{Id: it.CallID, Name: it.Name, Input: &input}}})
		case "function_call_output", "custom_tool_call_output":
			text, err := responsesText(it.Output)
			if err != nil {
				return nil, err
			}
			m := into(toolfleetv1.Role_ROLE_TOOL)
			m.Parts = append(m.Parts, llm.ResultPart(it.CallID, names[it.CallID], text, false))
		default:
			// OpenAI's own items (tool_search_call, web_search_call, …) are
			// carried verbatim, in place, with the assistant's turn.
			if it.raw != nil {
				var b bytes.Buffer
				if err := json.Compact(&b, it.raw); err != nil {
					return nil, malformed("openai-responses", err)
				}
				m := into(toolfleetv1.Role_ROLE_ASSISTANT)
				m.Parts = append(m.Parts, providerBlockPart(responsesName, typ, b.Bytes()))
			}
		}
	}
	return out, nil
}

// responsesText reads a string or an array of {type, text} content parts.
func responsesText(raw json.RawMessage) (string, error) {
	s, err := contentText(raw)
	if err != nil {
		return "", malformed("openai-responses content", err)
	}
	return s, nil
}

// RenderResponse implements Format.
func (OpenAIResponses) RenderResponse(msg *toolfleetv1.Message) ([]byte, error) {
	resp := orResponse{ID: "resp_toolfleet", Object: "response", Model: msg.GetModel(), Status: "completed", Output: responsesItems(msg, nil)}
	for i := range resp.Output {
		it := &resp.Output[i]
		if it.raw != nil {
			continue // a carried item keeps its own id and status
		}
		it.ID = fmt.Sprintf("item_%d", i)
		it.Status = "completed"
		if it.Type == "reasoning" {
			it.Status = ""
		}
	}
	if msg.GetStopReason() == llm.StopMaxTokens {
		resp.Status = "incomplete"
		resp.IncompleteDetails = &struct {
			Reason string `json:"reason"`
		}{"max_output_tokens"}
	}
	if u := msg.GetUsage(); u != nil {
		resp.Usage = &struct {
			InputTokens        int64 `json:"input_tokens"`
			OutputTokens       int64 `json:"output_tokens"`
			TotalTokens        int64 `json:"total_tokens"`
			InputTokensDetails *struct {
				CachedTokens int64 `json:"cached_tokens"`
			} `json:"input_tokens_details,omitempty"`
		}{InputTokens: u.GetInputTokens(), OutputTokens: u.GetOutputTokens(), TotalTokens: u.GetInputTokens() + u.GetOutputTokens()}
		if u.GetCacheReadTokens() > 0 {
			resp.Usage.InputTokensDetails = &struct {
				CachedTokens int64 `json:"cached_tokens"`
			}{u.GetCacheReadTokens()}
		}
	}
	return json.Marshal(resp)
}

// ParseResponse implements Format.
func (OpenAIResponses) ParseResponse(body []byte) (*toolfleetv1.Message, error) {
	var resp orResponse
	if err := json.Unmarshal(body, &resp); err != nil {
		return nil, malformed("openai-responses response", err)
	}
	if resp.Error != nil && resp.Status == "failed" {
		return nil, resp.Error.apiError("openai")
	}
	return responsesMessage(&resp)
}

func responsesMessage(resp *orResponse) (*toolfleetv1.Message, error) {
	msgs, err := responsesMessages(resp.Output)
	if err != nil {
		return nil, err
	}
	msg := &toolfleetv1.Message{Role: toolfleetv1.Role_ROLE_ASSISTANT, Model: resp.Model, StopReason: llm.StopEndTurn}
	for _, m := range msgs {
		msg.Parts = append(msg.Parts, m.Parts...)
	}
	if len(llm.ToolCalls(msg)) > 0 {
		msg.StopReason = llm.StopToolCalls
	}
	if resp.Status == "incomplete" {
		msg.StopReason = llm.StopMaxTokens
		if resp.IncompleteDetails != nil && resp.IncompleteDetails.Reason == "content_filter" {
			msg.StopReason = llm.StopContentFilter
		}
	}
	if u := resp.Usage; u != nil {
		msg.Usage = &toolfleetv1.Usage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens}
		if u.InputTokensDetails != nil {
			msg.Usage.CacheReadTokens = u.InputTokensDetails.CachedTokens
		}
	}
	return msg, nil
}

// NewStreamDecoder implements Format.
func (OpenAIResponses) NewStreamDecoder() StreamDecoder { return &responsesStream{} }

// responsesStream assembles from the delta events and, when the final
// response.completed event carries the whole response, takes that instead:
// it is authoritative.
type responsesStream struct {
	asm   llm.Assembler
	final *orResponse
}

type orEvent struct {
	Type        string      `json:"type"`
	OutputIndex int         `json:"output_index"`
	ItemID      string      `json:"item_id"`
	Delta       string      `json:"delta"`
	Item        *orItem     `json:"item"`
	Response    *orResponse `json:"response"`
	// Code and Message are set on an "error" event.
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (s *responsesStream) Decode(event string, data []byte) ([]llm.Delta, error) {
	if string(data) == "[DONE]" {
		return nil, nil
	}
	var ev orEvent
	if err := json.Unmarshal(data, &ev); err != nil {
		return nil, malformed("openai-responses event", err)
	}
	if ev.Type == "" {
		ev.Type = event
	}
	var out []llm.Delta
	switch ev.Type {
	case "response.created":
		if ev.Response != nil {
			out = append(out, llm.Delta{Model: ev.Response.Model})
		}
	case "response.output_text.delta":
		out = append(out, llm.Delta{Text: ev.Delta})
	case "response.reasoning_summary_text.delta":
		out = append(out, llm.Delta{Thinking: ev.Delta})
	case "response.output_item.added":
		switch {
		case ev.Item == nil:
		case ev.Item.Type == "function_call":
			args, _ := argumentFragment(ev.Item.Arguments)
			out = append(out, llm.Delta{ToolCall: &llm.ToolCallDelta{Index: ev.OutputIndex, ID: ev.Item.CallID, Name: ev.Item.Name, Arguments: args}})
		case ev.Item.Type == "custom_tool_call":
			// The input follows in custom_tool_call_input.delta events.
			out = append(out, llm.Delta{ToolCall: &llm.ToolCallDelta{Index: ev.OutputIndex, ID: ev.Item.CallID, Name: ev.Item.Name, Arguments: deref(ev.Item.Input), FreeText: true}})
		}
	case "response.function_call_arguments.delta":
		out = append(out, llm.Delta{ToolCall: &llm.ToolCallDelta{Index: ev.OutputIndex, Arguments: ev.Delta}})
	case "response.custom_tool_call_input.delta":
		out = append(out, llm.Delta{ToolCall: &llm.ToolCallDelta{Index: ev.OutputIndex, Arguments: ev.Delta, FreeText: true}})
	case "response.output_item.done":
		switch {
		case ev.Item == nil:
		case ev.Item.Type == "reasoning" && ev.Item.EncryptedContent != "":
			out = append(out, llm.Delta{ThinkingSignature: []byte(ev.Item.EncryptedContent)})
		case !responsesParsed(ev.Item.Type) && ev.Item.raw != nil:
			out = append(out, llm.Delta{ProviderBlock: &toolfleetv1.ProviderBlock{Provider: responsesName, Type: ev.Item.Type, Json: ev.Item.raw}})
		}
	case "response.failed":
		if ev.Response != nil && ev.Response.Error != nil {
			return nil, ev.Response.Error.apiError("openai")
		}
		return nil, llm.NewStreamError("openai", "", "response failed")
	case "response.completed", "response.incomplete":
		s.final = ev.Response
		if ev.Response != nil && ev.Response.Usage != nil {
			u := ev.Response.Usage
			out = append(out, llm.Delta{Usage: &toolfleetv1.Usage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens}})
		}
	case "error":
		return nil, llm.NewStreamError("openai", ev.Code, ev.Message)
	}
	for _, d := range out {
		s.asm.Add(d)
	}
	return out, nil
}

func (s *responsesStream) Message() (*toolfleetv1.Message, error) {
	if s.final != nil && len(s.final.Output) > 0 {
		return responsesMessage(s.final)
	}
	return s.asm.Message()
}
