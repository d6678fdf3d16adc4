package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm"
)

// Anthropic's Messages API streaming: server-sent events decoded into deltas.

// NewStreamDecoder implements Format.
func (Anthropic) NewStreamDecoder() StreamDecoder { return &anthropicStream{started: map[int]string{}} }

// anthropicStream decodes message_start / content_block_* / message_delta
// events. A tool_use block starts with its whole input (normally {}) and
// then sends input_json_delta fragments; the start input is used only when
// no fragment follows.
type anthropicStream struct {
	asm     llm.Assembler
	started map[int]string // block index → initial input of a tool_use block
	deltas  map[int]bool   // block index → received input_json_delta
	// carried holds blocks toolfleet does not interpret (server_tool_use,
	// code_execution_tool_result, …) until their content_block_stop.
	carried map[int]*carriedBlock
}

type carriedBlock struct {
	typ   string
	raw   json.RawMessage
	input strings.Builder
}

// block is the carried block as a whole: its start with the streamed
// input, when there was any, in place of the start's input.
func (c *carriedBlock) block() (*toolfleetv1.ProviderBlock, error) {
	raw := c.raw
	if c.input.Len() > 0 {
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(c.raw, &fields); err != nil {
			return nil, malformed("anthropic event", err)
		}
		input := json.RawMessage(c.input.String())
		if !json.Valid(input) {
			return nil, malformed("anthropic event", fmt.Errorf("%s block: streamed input is not JSON", c.typ))
		}
		fields["input"] = input
		b, err := json.Marshal(fields)
		if err != nil {
			return nil, malformed("anthropic event", err)
		}
		raw = b
	}
	return &toolfleetv1.ProviderBlock{Provider: "anthropic", Type: c.typ, Json: raw}, nil
}

type anEvent struct {
	Type         string      `json:"type"`
	Index        int         `json:"index"`
	Message      *anResponse `json:"message"`
	ContentBlock *anBlock    `json:"content_block"`
	Delta        *struct {
		Type        string       `json:"type"`
		Text        string       `json:"text"`
		PartialJSON string       `json:"partial_json"`
		Thinking    string       `json:"thinking"`
		Signature   string       `json:"signature"`
		StopReason  *string      `json:"stop_reason"`
		Container   *anContainer `json:"container"`
	} `json:"delta"`
	Usage *anUsage `json:"usage"`
	Error *struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

// anErrorBody is Anthropic's error body: {"type": "error", "error": {…}}.
type anErrorBody struct {
	Error *struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

func (s *anthropicStream) Decode(_ string, data []byte) ([]llm.Delta, error) {
	var ev anEvent
	if err := json.Unmarshal(data, &ev); err != nil {
		return nil, malformed("anthropic event", err)
	}
	if s.deltas == nil {
		s.deltas = map[int]bool{}
	}
	var out []llm.Delta
	switch ev.Type {
	case "message_start":
		if ev.Message != nil {
			out = append(out, llm.Delta{Model: ev.Message.Model})
			if u := ev.Message.Usage.canonical(); u != nil {
				out = append(out, llm.Delta{Usage: u})
			}
		}
	case "content_block_start":
		b := ev.ContentBlock
		if b == nil {
			return nil, malformed("anthropic event", errors.New("content_block_start without content_block"))
		}
		switch b.Type {
		case "text":
			if t := deref(b.Text); t != "" {
				out = append(out, llm.Delta{Text: t})
			}
		case "thinking":
			out = append(out, llm.Delta{Thinking: deref(b.Thinking)})
		case "redacted_thinking":
			out = append(out, llm.Delta{ThinkingSignature: []byte(b.Data)})
		case "tool_use":
			s.started[ev.Index] = string(b.Input)
			tc := &llm.ToolCallDelta{Index: ev.Index, ID: b.ID, Name: b.Name}
			if b.Caller != nil && b.Caller.Type != "" && b.Caller.Type != "direct" {
				tc.Caller = &toolfleetv1.ToolCaller{Type: b.Caller.Type, ToolId: b.Caller.ToolID}
			}
			out = append(out, llm.Delta{ToolCall: tc})
		default:
			if s.carried == nil {
				s.carried = map[int]*carriedBlock{}
			}
			s.carried[ev.Index] = &carriedBlock{typ: b.Type, raw: b.raw}
		}
	case "content_block_delta":
		d := ev.Delta
		if d == nil {
			return nil, malformed("anthropic event", errors.New("content_block_delta without delta"))
		}
		switch d.Type {
		case "text_delta":
			out = append(out, llm.Delta{Text: d.Text})
		case "thinking_delta":
			out = append(out, llm.Delta{Thinking: d.Thinking})
		case "signature_delta":
			out = append(out, llm.Delta{ThinkingSignature: []byte(d.Signature)})
		case "input_json_delta":
			if c, ok := s.carried[ev.Index]; ok {
				c.input.WriteString(d.PartialJSON)
				break
			}
			s.deltas[ev.Index] = true
			out = append(out, llm.Delta{ToolCall: &llm.ToolCallDelta{Index: ev.Index, Arguments: d.PartialJSON}})
		}
	case "content_block_stop":
		if c, ok := s.carried[ev.Index]; ok {
			delete(s.carried, ev.Index)
			pb, err := c.block()
			if err != nil {
				return nil, err
			}
			out = append(out, llm.Delta{ProviderBlock: pb})
		}
		if input, ok := s.started[ev.Index]; ok && !s.deltas[ev.Index] && input != "" {
			out = append(out, llm.Delta{ToolCall: &llm.ToolCallDelta{Index: ev.Index, Arguments: input}})
		}
	case "message_delta":
		if ev.Delta != nil && ev.Delta.StopReason != nil {
			out = append(out, llm.Delta{StopReason: anthropicStop(*ev.Delta.StopReason)})
		}
		if ev.Delta != nil && ev.Delta.Container != nil && ev.Delta.Container.ID != "" {
			out = append(out, llm.Delta{Container: ev.Delta.Container.ID})
		}
		if u := ev.Usage.canonical(); u != nil {
			out = append(out, llm.Delta{Usage: u})
		}
	case "error":
		if ev.Error == nil {
			return nil, llm.NewStreamError("anthropic", "", "stream error")
		}
		return nil, llm.NewStreamError("anthropic", ev.Error.Type, ev.Error.Message)
	}
	for _, d := range out {
		s.asm.Add(d)
	}
	return out, nil
}

func (s *anthropicStream) Message() (*toolfleetv1.Message, error) { return s.asm.Message() }
