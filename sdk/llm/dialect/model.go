package dialect

import (
	"context"
	"errors"
	"fmt"
	"strings"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/internal/canon"
)

// WithTextProtocol adapts a model without native tool calls: requests are
// rewritten with ForTextProtocol, replies parsed with p. While streaming,
// text deltas pass through a TagFilter so callers never see half a tag; when
// the request asks for no parallel calls, or p allows one call per turn by
// definition (XMLFunction), the stream is cut right after the first closing
// tag.
func WithTextProtocol(m llm.Model, p llm.TextProtocol) llm.Model {
	return &textProtocolModel{m: m, p: p}
}

type textProtocolModel struct {
	m llm.Model
	p llm.TextProtocol
}

func (t *textProtocolModel) Complete(ctx context.Context, req *llm.Request) (*toolfleetv1.Message, error) {
	msg, err := t.m.Complete(ctx, ForTextProtocol(t.p, req))
	if err != nil {
		return nil, err
	}
	if req.OneCallPerTurn() || isSingleCall(t.p) {
		// As when streaming: what follows the first block is not read, so
		// a malformed second block cannot fail a turn that uses only one.
		msg = truncateAfterFirstBlock(msg, t.p, req.ThinkingOpen)
	}
	return t.parse(msg, req)
}

// parse extracts the calls and keeps their ids unique in the conversation:
// generated ids ("call_1") restart every turn, and a provider-facing history
// must not repeat one.
func (t *textProtocolModel) parse(msg *toolfleetv1.Message, req *llm.Request) (*toolfleetv1.Message, error) {
	out, err := parseWith(msg, []llm.TextProtocol{t.p}, req.Tools, req.ThinkingOpen)
	if err != nil {
		return nil, err
	}
	used := canon.CallNames(req.Messages)
	turn := 1
	for _, m := range req.Messages {
		if m.GetRole() == toolfleetv1.Role_ROLE_ASSISTANT {
			turn++
		}
	}
	for _, c := range llm.ToolCalls(out) {
		if _, dup := used[c.GetId()]; dup {
			c.Id = fmt.Sprintf("%s_t%d", c.GetId(), turn)
		}
	}
	return llm.FinishTurn(req, out), nil
}

func (t *textProtocolModel) Stream(ctx context.Context, req *llm.Request, onDelta func(llm.Delta) error) (*toolfleetv1.Message, error) {
	if dec, ok := NewTextDecoder(t.p, req.Tools); ok {
		if req.ThinkingOpen {
			dec.StartInThinking()
		}
		return t.streamDialect(ctx, req, dec, onDelta)
	}
	filter := NewTagFilter(t.p)
	oneCall := req.OneCallPerTurn() || isSingleCall(t.p)
	cut := false
	msg, err := t.m.Stream(ctx, ForTextProtocol(t.p, req), func(d llm.Delta) error {
		if d.Text != "" {
			d.Text = filter.Write(d.Text)
		}
		if onDelta != nil && !d.Empty() {
			if err := onDelta(d); err != nil {
				return err
			}
		}
		if oneCall && filter.Blocks() > 0 {
			cut = true
			return llm.StopStream
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// After a cut, held-back text is the start of what was deliberately not read.
	if rest := filter.Flush(); !cut && rest != "" && onDelta != nil {
		if err := onDelta(llm.Delta{Text: rest}); err != nil && !errors.Is(err, llm.StopStream) {
			return nil, err
		}
	}
	if cut {
		msg = truncateAfterFirstBlock(msg, t.p, false)
	}
	return t.parse(msg, req)
}

// streamDialect streams a Dialect's reply through dec: text deltas carry
// only text outside calls (a marker split across chunks is held back), and
// each call is sent as one ToolCall delta the moment it is complete. With
// one call per turn the stream is cut right after the first call. The
// message is then parsed from the text read (the same scanner), so it
// agrees with what was streamed.
func (t *textProtocolModel) streamDialect(ctx context.Context, req *llm.Request, dec *TextDecoder, onDelta func(llm.Delta) error) (*toolfleetv1.Message, error) {
	dec.step = true
	if req.OneCallPerTurn() {
		dec.limit = 1
	}
	// pass feeds text to dec and sends what it returns, in order.
	pass := func(chunk string, eof bool) error {
		for {
			var text string
			var calls []*toolfleetv1.ToolCall
			var err error
			if eof {
				text, calls, err = dec.Close()
			} else {
				text, calls, err = dec.Write(chunk)
			}
			if err != nil {
				return nil // reported by the parse of the whole text
			}
			if th := dec.Thinking(); onDelta != nil && th != "" {
				if err := onDelta(llm.Delta{Thinking: th}); err != nil {
					return err
				}
			}
			if onDelta != nil && text != "" {
				if err := onDelta(llm.Delta{Text: text}); err != nil {
					return err
				}
			}
			for i, c := range calls {
				if onDelta == nil {
					break
				}
				d := llm.Delta{ToolCall: &llm.ToolCallDelta{Index: dec.Calls() - len(calls) + i, ID: c.GetId(), Name: c.GetName(), Arguments: argsJSON(c)}}
				if err := onDelta(d); err != nil {
					return err
				}
			}
			if len(calls) == 0 || eof || dec.limit > 0 && dec.Calls() >= dec.limit {
				return nil
			}
			chunk = ""
		}
	}
	msg, err := t.m.Stream(ctx, ForTextProtocol(t.p, req), func(d llm.Delta) error {
		if d.Text != "" {
			if err := pass(d.Text, false); err != nil {
				return err
			}
			d.Text = ""
		}
		if onDelta != nil && !d.Empty() {
			if err := onDelta(d); err != nil {
				return err
			}
		}
		if dec.limit > 0 && dec.Calls() >= dec.limit {
			return llm.StopStream
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if dec.limit > 0 && dec.Calls() >= dec.limit {
		msg = truncateAfterFirstBlock(msg, t.p, req.ThinkingOpen)
	} else if err := pass("", true); err != nil && !errors.Is(err, llm.StopStream) {
		return nil, err
	}
	return t.parse(msg, req)
}

// truncateAfterFirstBlock drops the text after the first block's closing
// tag: the chunk that closed the block may carry the start of the next one.
// The closing tag is searched after the opening one: a fenced block's
// "\n~~~" also begins its own opening line. A Dialect is cut after its
// first call (read from inside the reasoning channel when the prompt opened
// it: thinkingOpen).
func truncateAfterFirstBlock(msg *toolfleetv1.Message, p llm.TextProtocol, thinkingOpen bool) *toolfleetv1.Message {
	text := llm.MessageText(msg)
	if dec, ok := NewTextDecoder(p, nil); ok {
		dec.limit = 1
		if thinkingOpen {
			dec.StartInThinking()
		}
		if _, calls, err := dec.Write(text); err == nil && len(calls) > 0 {
			return withText(msg, text[:dec.consumed])
		}
		return msg
	}
	open := strings.TrimPrefix(p.OpenTag(), "\n")
	i := strings.Index(text, open)
	if i < 0 {
		return msg
	}
	j := strings.Index(text[i+len(open):], p.CloseTag())
	if j < 0 {
		return msg
	}
	return withText(msg, text[:i+len(open)+j+len(p.CloseTag())])
}

// WithAutoFallback wraps a native model so a reply without tool calls but
// with text-protocol blocks is parsed into calls (see ParseAuto); when the
// request's model name says which dialect the model speaks (For),
// that dialect is parsed first.
func WithAutoFallback(m llm.Model) llm.Model { return &fallbackModel{m: m} }

type fallbackModel struct{ m llm.Model }

func (f *fallbackModel) Complete(ctx context.Context, req *llm.Request) (*toolfleetv1.Message, error) {
	msg, err := f.m.Complete(ctx, req)
	if err != nil {
		return nil, err
	}
	out, err := parseAuto(msg, req.Model, req.Tools)
	if err != nil {
		return nil, err
	}
	return llm.FinishTurn(req, out), nil
}

func (f *fallbackModel) Stream(ctx context.Context, req *llm.Request, onDelta func(llm.Delta) error) (*toolfleetv1.Message, error) {
	msg, err := f.m.Stream(ctx, req, onDelta)
	if err != nil {
		return nil, err
	}
	out, err := parseAuto(msg, req.Model, req.Tools)
	if err != nil {
		return nil, err
	}
	return llm.FinishTurn(req, out), nil
}
