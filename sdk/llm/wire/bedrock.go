package wire

import (
	"encoding/json"
	"errors"

	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/internal/canon"
)

// Bedrock is the Amazon Bedrock Converse format: toolConfig.tools[].toolSpec
// with inputSchema.json, toolUse blocks, toolResult blocks with a status, and
// reasoningContent blocks. The model id is part of the URL. Converse has no
// "none" tool choice and no parallel flag: ToolChoiceNone omits toolChoice
// (the model may still call a tool) and ParallelToolCalls is ignored.
type Bedrock struct{}

// Name implements Format.
func (Bedrock) Name() string { return "bedrock" }

type brTool struct {
	ToolSpec *struct {
		Name        string `json:"name"`
		Description string `json:"description,omitempty"`
		InputSchema struct {
			JSON map[string]any `json:"json"`
		} `json:"inputSchema"`
	} `json:"toolSpec,omitempty"`
}

type brBlock struct {
	Text             *string      `json:"text,omitempty"`
	ToolUse          *brToolUse   `json:"toolUse,omitempty"`
	ToolResult       *brResult    `json:"toolResult,omitempty"`
	ReasoningContent *brReasoning `json:"reasoningContent,omitempty"`
}

type brToolUse struct {
	ToolUseID string          `json:"toolUseId"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
}

type brResult struct {
	ToolUseID string          `json:"toolUseId"`
	Content   []brResultBlock `json:"content"`
	Status    string          `json:"status,omitempty"`
}

type brResultBlock struct {
	Text *string `json:"text,omitempty"`
	JSON any     `json:"json,omitempty"`
}

type brReasoning struct {
	ReasoningText *struct {
		Text      string `json:"text"`
		Signature string `json:"signature,omitempty"`
	} `json:"reasoningText,omitempty"`
	RedactedContent []byte `json:"redactedContent,omitempty"`
}

type brMessage struct {
	Role    string    `json:"role"`
	Content []brBlock `json:"content"`
}

type brToolConfig struct {
	Tools      []brTool                   `json:"tools"`
	ToolChoice map[string]json.RawMessage `json:"toolChoice,omitempty"`
}

type brRequest struct {
	Messages        []brMessage   `json:"messages"`
	System          []brBlock     `json:"system,omitempty"`
	ToolConfig      *brToolConfig `json:"toolConfig,omitempty"`
	InferenceConfig *struct {
		MaxTokens int `json:"maxTokens,omitempty"`
	} `json:"inferenceConfig,omitempty"`
}

type brUsage struct {
	InputTokens           int64 `json:"inputTokens"`
	OutputTokens          int64 `json:"outputTokens"`
	TotalTokens           int64 `json:"totalTokens"`
	CacheReadInputTokens  int64 `json:"cacheReadInputTokens,omitempty"`
	CacheWriteInputTokens int64 `json:"cacheWriteInputTokens,omitempty"`
}

func (u *brUsage) canonical() *toolfleetv1.Usage {
	if u == nil {
		return nil
	}
	return &toolfleetv1.Usage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, CacheReadTokens: u.CacheReadInputTokens, CacheWriteTokens: u.CacheWriteInputTokens}
}

type brResponse struct {
	Output struct {
		Message *brMessage `json:"message"`
	} `json:"output"`
	StopReason string   `json:"stopReason"`
	Usage      *brUsage `json:"usage,omitempty"`
}

// RenderTools implements Format (the toolConfig.tools array). Converse has
// no strict mode; schemas get the Anthropic transform, which most Bedrock
// models accept.
func (Bedrock) RenderTools(tools []*toolfleetv1.ToolDefinition, _ bool) ([]byte, error) {
	return json.Marshal(bedrockTools(tools))
}

func bedrockTools(tools []*toolfleetv1.ToolDefinition) []brTool {
	out := make([]brTool, 0, len(tools))
	for _, d := range tools {
		var t brTool
		t.ToolSpec = &struct {
			Name        string `json:"name"`
			Description string `json:"description,omitempty"`
			InputSchema struct {
				JSON map[string]any `json:"json"`
			} `json:"inputSchema"`
		}{Name: d.GetModelName(), Description: d.GetDescription()}
		t.ToolSpec.InputSchema.JSON = AnthropicSchema(canon.SchemaOf(d), false)
		out = append(out, t)
	}
	return out
}

// ParseTools implements Format.
func (Bedrock) ParseTools(body []byte) ([]*toolfleetv1.ToolDefinition, error) {
	var tools []brTool
	if err := json.Unmarshal(body, &tools); err != nil {
		return nil, malformed("bedrock tools", err)
	}
	return bedrockDefs(tools)
}

func bedrockDefs(tools []brTool) ([]*toolfleetv1.ToolDefinition, error) {
	var defs []*toolfleetv1.ToolDefinition
	for _, t := range tools {
		if t.ToolSpec == nil {
			continue // cachePoint entries
		}
		d, err := defFromWire(t.ToolSpec.Name, t.ToolSpec.Description, t.ToolSpec.InputSchema.JSON)
		if err != nil {
			return nil, err
		}
		defs = append(defs, d)
	}
	return defs, nil
}

// RenderRequest implements Format.
func (Bedrock) RenderRequest(req *llm.Request) ([]byte, error) {
	out := brRequest{Messages: []brMessage{}}
	if sys := canon.SystemText(req.Messages); sys != "" {
		out.System = []brBlock{{Text: &sys}}
	}
	if len(req.Tools) > 0 {
		out.ToolConfig = &brToolConfig{Tools: bedrockTools(req.Tools)}
		switch req.ToolChoice.Mode {
		case llm.ToolChoiceAuto:
			out.ToolConfig.ToolChoice = map[string]json.RawMessage{"auto": canon.RawJSON(struct{}{})}
		case llm.ToolChoiceRequired:
			out.ToolConfig.ToolChoice = map[string]json.RawMessage{"any": canon.RawJSON(struct{}{})}
		case llm.ToolChoiceTool:
			out.ToolConfig.ToolChoice = map[string]json.RawMessage{"tool": canon.RawJSON(map[string]string{"name": req.ToolChoice.Name})}
		}
	}
	if req.MaxTokens > 0 {
		out.InferenceConfig = &struct {
			MaxTokens int `json:"maxTokens,omitempty"`
		}{req.MaxTokens}
	}
	for _, m := range req.Messages {
		if m.GetRole() == toolfleetv1.Role_ROLE_SYSTEM {
			continue
		}
		role := "user"
		if m.GetRole() == toolfleetv1.Role_ROLE_ASSISTANT {
			role = "assistant"
		}
		blocks := bedrockBlocks(m)
		if len(blocks) == 0 {
			continue
		}
		if n := len(out.Messages); n > 0 && out.Messages[n-1].Role == role {
			out.Messages[n-1].Content = append(out.Messages[n-1].Content, blocks...)
			continue
		}
		out.Messages = append(out.Messages, brMessage{Role: role, Content: blocks})
	}
	return json.Marshal(out)
}

func bedrockBlocks(m *toolfleetv1.Message) []brBlock {
	var out []brBlock
	for _, p := range m.GetParts() {
		switch k := p.GetKind().(type) {
		case *toolfleetv1.Part_Text:
			if k.Text != "" {
				out = append(out, brBlock{Text: &k.Text})
			}
		case *toolfleetv1.Part_Thinking:
			th := k.Thinking
			r := &brReasoning{}
			if th.GetText() == "" && len(th.GetSignature()) > 0 {
				r.RedactedContent = th.GetSignature()
			} else {
				r.ReasoningText = &struct {
					Text      string `json:"text"`
					Signature string `json:"signature,omitempty"`
				}{th.GetText(), string(th.GetSignature())}
			}
			out = append(out, brBlock{ReasoningContent: r})
		case *toolfleetv1.Part_ToolCall:
			c := k.ToolCall
			out = append(out, brBlock{ToolUse: &brToolUse{ToolUseID: c.GetId(), Name: c.GetName(), Input: canon.CallArguments(c)}})
		case *toolfleetv1.Part_ToolResult:
			r := k.ToolResult
			res := &brResult{ToolUseID: r.GetCallId(), Status: "success"}
			if r.GetIsError() {
				res.Status = "error"
			}
			if st := r.GetStructured(); st != nil && st.GetStructValue() != nil {
				// Converse's json block must be an object.
				res.Content = []brResultBlock{{JSON: st.AsInterface()}}
			} else {
				text := canon.ResultText(r)
				res.Content = []brResultBlock{{Text: &text}}
			}
			out = append(out, brBlock{ToolResult: res})
		}
	}
	return out
}

// ParseRequest implements Format.
func (Bedrock) ParseRequest(body []byte) (*llm.Request, error) {
	var in brRequest
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, malformed("bedrock request", err)
	}
	req := &llm.Request{}
	if in.ToolConfig != nil {
		var err error
		if req.Tools, err = bedrockDefs(in.ToolConfig.Tools); err != nil {
			return nil, err
		}
		tc := in.ToolConfig.ToolChoice
		switch {
		case tc["auto"] != nil:
			req.ToolChoice.Mode = llm.ToolChoiceAuto
		case tc["any"] != nil:
			req.ToolChoice.Mode = llm.ToolChoiceRequired
		case tc["tool"] != nil:
			var t struct {
				Name string `json:"name"`
			}
			if err := json.Unmarshal(tc["tool"], &t); err != nil {
				return nil, malformed("bedrock toolChoice", err)
			}
			req.ToolChoice = llm.ToolChoice{Mode: llm.ToolChoiceTool, Name: t.Name}
		}
	}
	if in.InferenceConfig != nil {
		req.MaxTokens = in.InferenceConfig.MaxTokens
	}
	if len(in.System) > 0 {
		var sys string
		for _, b := range in.System {
			sys += deref(b.Text)
		}
		req.Messages = append(req.Messages, llm.System(sys))
	}
	names := map[string]string{}
	for _, m := range in.Messages {
		if m.Role == "assistant" {
			msg, err := bedrockAssistant(m.Content)
			if err != nil {
				return nil, err
			}
			for _, c := range llm.ToolCalls(msg) {
				names[c.GetId()] = c.GetName()
			}
			req.Messages = append(req.Messages, msg)
			continue
		}
		tool := &toolfleetv1.Message{Role: toolfleetv1.Role_ROLE_TOOL}
		user := &toolfleetv1.Message{Role: toolfleetv1.Role_ROLE_USER}
		for _, b := range m.Content {
			switch {
			case b.ToolResult != nil:
				r, err := bedrockResult(b.ToolResult, names)
				if err != nil {
					return nil, err
				}
				tool.Parts = append(tool.Parts, &toolfleetv1.Part{Kind: &toolfleetv1.Part_ToolResult{ToolResult: r}})
			case b.Text != nil:
				user.Parts = append(user.Parts, llm.Text(*b.Text))
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

func bedrockResult(in *brResult, names map[string]string) (*toolfleetv1.ToolResult, error) {
	r := &toolfleetv1.ToolResult{CallId: in.ToolUseID, Name: names[in.ToolUseID], IsError: in.Status == "error"}
	for _, c := range in.Content {
		switch {
		case c.Text != nil:
			r.Content += *c.Text
		case c.JSON != nil:
			b, err := json.Marshal(c.JSON)
			if err != nil {
				return nil, malformed("bedrock toolResult", err)
			}
			r.Content += string(b)
			if r.Structured, err = structpb.NewValue(c.JSON); err != nil {
				return nil, malformed("bedrock toolResult", err)
			}
		}
	}
	return r, nil
}

func bedrockAssistant(blocks []brBlock) (*toolfleetv1.Message, error) {
	msg := &toolfleetv1.Message{Role: toolfleetv1.Role_ROLE_ASSISTANT}
	for _, b := range blocks {
		switch {
		case b.Text != nil:
			msg.Parts = append(msg.Parts, llm.Text(*b.Text))
		case b.ToolUse != nil:
			u := b.ToolUse
			args, err := llm.DecodeArguments(u.Name+" ("+u.ToolUseID+")", u.Input)
			if err != nil {
				return nil, err
			}
			msg.Parts = append(msg.Parts, &toolfleetv1.Part{Kind: &toolfleetv1.Part_ToolCall{ToolCall: &toolfleetv1.ToolCall{Id: u.ToolUseID, Name: u.Name, Arguments: args}}})
		case b.ReasoningContent != nil:
			th := &toolfleetv1.Thinking{Signature: b.ReasoningContent.RedactedContent}
			if rt := b.ReasoningContent.ReasoningText; rt != nil {
				th.Text, th.Signature = rt.Text, []byte(rt.Signature)
			}
			msg.Parts = append(msg.Parts, &toolfleetv1.Part{Kind: &toolfleetv1.Part_Thinking{Thinking: th}})
		}
	}
	return msg, nil
}

func bedrockStop(reason string) string {
	switch reason {
	case "end_turn", "stop_sequence", "":
		return llm.StopEndTurn
	case "tool_use":
		return llm.StopToolCalls
	case "max_tokens", "model_context_window_exceeded":
		return llm.StopMaxTokens
	case "guardrail_intervened", "content_filtered":
		return llm.StopContentFilter
	}
	return reason
}

// RenderResponse implements Format.
func (Bedrock) RenderResponse(msg *toolfleetv1.Message) ([]byte, error) {
	var resp brResponse
	resp.Output.Message = &brMessage{Role: "assistant", Content: bedrockBlocks(msg)}
	if resp.Output.Message.Content == nil {
		resp.Output.Message.Content = []brBlock{}
	}
	resp.StopReason = anthropicStopReason(msg.GetStopReason())
	if resp.StopReason == "refusal" {
		resp.StopReason = "content_filtered"
	}
	if u := msg.GetUsage(); u != nil {
		resp.Usage = &brUsage{InputTokens: u.GetInputTokens(), OutputTokens: u.GetOutputTokens(), TotalTokens: u.GetInputTokens() + u.GetOutputTokens(), CacheReadInputTokens: u.GetCacheReadTokens(), CacheWriteInputTokens: u.GetCacheWriteTokens()}
	}
	return json.Marshal(resp)
}

// ParseResponse implements Format.
func (Bedrock) ParseResponse(body []byte) (*toolfleetv1.Message, error) {
	var resp brResponse
	if err := json.Unmarshal(body, &resp); err != nil {
		return nil, malformed("bedrock response", err)
	}
	if resp.Output.Message == nil {
		return nil, malformed("bedrock response", errors.New("no output.message"))
	}
	msg, err := bedrockAssistant(resp.Output.Message.Content)
	if err != nil {
		return nil, err
	}
	msg.StopReason = bedrockStop(resp.StopReason)
	msg.Usage = resp.Usage.canonical()
	return msg, nil
}

// NewStreamDecoder implements Format for ConverseStream. Its events travel
// in AWS event-stream framing (DecodeEventStream unframes a whole response
// body); Decode takes one unframed event: the
// :event-type header (messageStart, contentBlockStart, contentBlockDelta,
// contentBlockStop, messageStop, metadata) and its JSON payload. A payload
// that wraps itself ({"contentBlockDelta": {…}}, as the SDKs print events)
// is accepted with an empty event name.
func (Bedrock) NewStreamDecoder() StreamDecoder { return &bedrockStream{} }

type bedrockStream struct{ asm llm.Assembler }

type brEvent struct {
	ContentBlockIndex int `json:"contentBlockIndex"`
	Start             *struct {
		ToolUse *struct {
			ToolUseID string `json:"toolUseId"`
			Name      string `json:"name"`
		} `json:"toolUse"`
	} `json:"start"`
	Delta *struct {
		Text    *string `json:"text"`
		ToolUse *struct {
			Input string `json:"input"`
		} `json:"toolUse"`
		ReasoningContent *struct {
			Text      string `json:"text"`
			Signature string `json:"signature"`
		} `json:"reasoningContent"`
	} `json:"delta"`
	StopReason string   `json:"stopReason"`
	Usage      *brUsage `json:"usage"`
}

func (s *bedrockStream) Decode(event string, data []byte) ([]llm.Delta, error) {
	if event == "" {
		var wrapped map[string]json.RawMessage
		if err := json.Unmarshal(data, &wrapped); err != nil {
			return nil, malformed("bedrock event", err)
		}
		if len(wrapped) != 1 {
			return nil, malformed("bedrock event", errors.New("want one event per payload"))
		}
		for name, payload := range wrapped {
			event, data = name, payload
		}
	}
	var ev brEvent
	if err := json.Unmarshal(data, &ev); err != nil {
		return nil, malformed("bedrock event", err)
	}
	var out []llm.Delta
	switch event {
	case "contentBlockStart":
		if ev.Start != nil && ev.Start.ToolUse != nil {
			out = append(out, llm.Delta{ToolCall: &llm.ToolCallDelta{Index: ev.ContentBlockIndex, ID: ev.Start.ToolUse.ToolUseID, Name: ev.Start.ToolUse.Name}})
		}
	case "contentBlockDelta":
		if d := ev.Delta; d != nil {
			switch {
			case d.Text != nil:
				out = append(out, llm.Delta{Text: *d.Text})
			case d.ToolUse != nil:
				out = append(out, llm.Delta{ToolCall: &llm.ToolCallDelta{Index: ev.ContentBlockIndex, Arguments: d.ToolUse.Input}})
			case d.ReasoningContent != nil:
				out = append(out, llm.Delta{Thinking: d.ReasoningContent.Text})
				if d.ReasoningContent.Signature != "" {
					out[len(out)-1].ThinkingSignature = []byte(d.ReasoningContent.Signature)
				}
			}
		}
	case "messageStop":
		out = append(out, llm.Delta{StopReason: bedrockStop(ev.StopReason)})
	case "metadata":
		if u := ev.Usage.canonical(); u != nil {
			out = append(out, llm.Delta{Usage: u})
		}
	case "internalServerException", "modelStreamErrorException", "throttlingException", "validationException", "serviceUnavailableException":
		return nil, bedrockStreamError(event, data)
	}
	for _, d := range out {
		s.asm.Add(d)
	}
	return out, nil
}

func (s *bedrockStream) Message() (*toolfleetv1.Message, error) { return s.asm.Message() }

// bedrockStreamError classifies an exception event by its type; the
// payload's "message" (or "Message") becomes the error text.
func bedrockStreamError(kind string, payload []byte) *llm.APIError {
	var body struct {
		Message  string `json:"message"`
		Message2 string `json:"Message"`
	}
	_ = json.Unmarshal(payload, &body) // a payload that is not JSON leaves the kind alone as the message
	msg := body.Message
	if msg == "" {
		msg = body.Message2
	}
	return llm.NewStreamError("bedrock", kind, msg)
}
