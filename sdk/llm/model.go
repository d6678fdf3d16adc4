package llm

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm/internal/canon"
	"github.com/toolfleet/toolfleet/sdk/retry"
)

// Model is a language model that can call tools.
type Model interface {
	// Complete sends req and returns the assistant's turn.
	Complete(ctx context.Context, req *Request) (*toolfleetv1.Message, error)
	// Stream sends req, calls onDelta (may be nil) for every delta as it
	// arrives and returns the assembled turn. An onDelta error ends the
	// stream and is returned, except StopStream, which ends it early and
	// still returns what was assembled.
	Stream(ctx context.Context, req *Request, onDelta func(Delta) error) (*toolfleetv1.Message, error)
}

// WithTextProtocol adapts a model without native tool calls: requests are
// rewritten with ForTextProtocol, replies parsed with p. While streaming,
// text deltas pass through a TagFilter so callers never see half a tag; when
// the request asks for no parallel calls, or p allows one call per turn by
// definition (XMLFunction), the stream is cut right after the first closing
// tag.
func WithTextProtocol(m Model, p TextProtocol) Model { return &textProtocolModel{m: m, p: p} }

type textProtocolModel struct {
	m Model
	p TextProtocol
}

func (t *textProtocolModel) Complete(ctx context.Context, req *Request) (*toolfleetv1.Message, error) {
	msg, err := t.m.Complete(ctx, ForTextProtocol(t.p, req))
	if err != nil {
		return nil, err
	}
	if req.OneCallPerTurn() || isSingleCall(t.p) {
		// As when streaming: what follows the first block is not read, so
		// a malformed second block cannot fail a turn that uses only one.
		msg = truncateAfterFirstBlock(msg, t.p)
	}
	return t.parse(msg, req)
}

// parse extracts the calls and keeps their ids unique in the conversation:
// generated ids ("call_1") restart every turn, and a provider-facing history
// must not repeat one.
func (t *textProtocolModel) parse(msg *toolfleetv1.Message, req *Request) (*toolfleetv1.Message, error) {
	out, err := ParseAuto(msg, t.p, req.Tools)
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
	for _, c := range ToolCalls(out) {
		if _, dup := used[c.GetId()]; dup {
			c.Id = fmt.Sprintf("%s_t%d", c.GetId(), turn)
		}
	}
	return FinishTurn(req, out), nil
}

func (t *textProtocolModel) Stream(ctx context.Context, req *Request, onDelta func(Delta) error) (*toolfleetv1.Message, error) {
	if dec, ok := NewTextDecoder(t.p, req.Tools); ok {
		return t.streamDialect(ctx, req, dec, onDelta)
	}
	filter := NewTagFilter(t.p)
	oneCall := req.OneCallPerTurn() || isSingleCall(t.p)
	cut := false
	msg, err := t.m.Stream(ctx, ForTextProtocol(t.p, req), func(d Delta) error {
		if d.Text != "" {
			d.Text = filter.Write(d.Text)
		}
		if onDelta != nil && !d.empty() {
			if err := onDelta(d); err != nil {
				return err
			}
		}
		if oneCall && filter.Blocks() > 0 {
			cut = true
			return StopStream
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// After a cut, held-back text is the start of what was deliberately not read.
	if rest := filter.Flush(); !cut && rest != "" && onDelta != nil {
		if err := onDelta(Delta{Text: rest}); err != nil && !errors.Is(err, StopStream) {
			return nil, err
		}
	}
	if cut {
		msg = truncateAfterFirstBlock(msg, t.p)
	}
	return t.parse(msg, req)
}

// streamDialect streams a Dialect's reply through dec: text deltas carry
// only text outside calls (a marker split across chunks is held back), and
// each call is sent as one ToolCall delta the moment it is complete. With
// one call per turn the stream is cut right after the first call. The
// message is then parsed from the text read (the same scanner), so it
// agrees with what was streamed.
func (t *textProtocolModel) streamDialect(ctx context.Context, req *Request, dec *TextDecoder, onDelta func(Delta) error) (*toolfleetv1.Message, error) {
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
				if err := onDelta(Delta{Thinking: th}); err != nil {
					return err
				}
			}
			if onDelta != nil && text != "" {
				if err := onDelta(Delta{Text: text}); err != nil {
					return err
				}
			}
			for i, c := range calls {
				if onDelta == nil {
					break
				}
				d := Delta{ToolCall: &ToolCallDelta{Index: dec.Calls() - len(calls) + i, ID: c.GetId(), Name: c.GetName(), Arguments: argsJSON(c)}}
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
	msg, err := t.m.Stream(ctx, ForTextProtocol(t.p, req), func(d Delta) error {
		if d.Text != "" {
			if err := pass(d.Text, false); err != nil {
				return err
			}
			d.Text = ""
		}
		if onDelta != nil && !d.empty() {
			if err := onDelta(d); err != nil {
				return err
			}
		}
		if dec.limit > 0 && dec.Calls() >= dec.limit {
			return StopStream
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if dec.limit > 0 && dec.Calls() >= dec.limit {
		msg = truncateAfterFirstBlock(msg, t.p)
	} else if err := pass("", true); err != nil && !errors.Is(err, StopStream) {
		return nil, err
	}
	return t.parse(msg, req)
}

// truncateAfterFirstBlock drops the text after the first block's closing
// tag: the chunk that closed the block may carry the start of the next one.
// The closing tag is searched after the opening one: a fenced block's
// "\n~~~" also begins its own opening line. A Dialect is cut after its
// first call.
func truncateAfterFirstBlock(msg *toolfleetv1.Message, p TextProtocol) *toolfleetv1.Message {
	text := MessageText(msg)
	if dec, ok := NewTextDecoder(p, nil); ok {
		dec.limit = 1
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
// request's model name says which dialect the model speaks (DialectFor),
// that dialect is parsed first.
func WithAutoFallback(m Model) Model { return &fallbackModel{m: m} }

type fallbackModel struct{ m Model }

func (f *fallbackModel) Complete(ctx context.Context, req *Request) (*toolfleetv1.Message, error) {
	msg, err := f.m.Complete(ctx, req)
	if err != nil {
		return nil, err
	}
	out, err := parseAuto(msg, req.Model, req.Tools)
	if err != nil {
		return nil, err
	}
	return FinishTurn(req, out), nil
}

func (f *fallbackModel) Stream(ctx context.Context, req *Request, onDelta func(Delta) error) (*toolfleetv1.Message, error) {
	msg, err := f.m.Stream(ctx, req, onDelta)
	if err != nil {
		return nil, err
	}
	out, err := parseAuto(msg, req.Model, req.Tools)
	if err != nil {
		return nil, err
	}
	return FinishTurn(req, out), nil
}

// RetryPolicy says how WithRetry retries errors that match ErrRetryable: the
// one jittered-backoff policy of package retry, shared with sdk/client.
type RetryPolicy = retry.Policy

// Defaults of WithRetry where the policy leaves a field zero: providers ask for
// longer waits than tools do.
const (
	DefaultRetryBackoff = 500 * time.Millisecond
	DefaultRetryMaxWait = 30 * time.Second
)

// WithRetry retries Complete, and Stream until its first delta, on
// retryable provider errors (408, 409, 429, 5xx), waiting the server's
// retry-after when it sent one (capped by MaxBackoff), else a jittered
// exponential backoff. Waits end early when ctx is done. Zero fields default to
// 3 attempts, [DefaultRetryBackoff] and [DefaultRetryMaxWait].
func WithRetry(m Model, p RetryPolicy) Model {
	p = p.Or(RetryPolicy{InitialBackoff: DefaultRetryBackoff, MaxBackoff: DefaultRetryMaxWait}).WithDefaults()
	return &retryModel{m: m, p: p}
}

type retryModel struct {
	m Model
	p RetryPolicy
}

func (r *retryModel) Complete(ctx context.Context, req *Request) (*toolfleetv1.Message, error) {
	return r.do(ctx, func() (*toolfleetv1.Message, bool, error) {
		msg, err := r.m.Complete(ctx, req)
		return msg, true, err
	})
}

func (r *retryModel) Stream(ctx context.Context, req *Request, onDelta func(Delta) error) (*toolfleetv1.Message, error) {
	return r.do(ctx, func() (*toolfleetv1.Message, bool, error) {
		started := false
		msg, err := r.m.Stream(ctx, req, func(d Delta) error {
			started = true
			if onDelta == nil {
				return nil
			}
			return onDelta(d)
		})
		// Once deltas reached the caller a retry would repeat them.
		return msg, !started, err
	})
}

func (r *retryModel) do(ctx context.Context, try func() (*toolfleetv1.Message, bool, error)) (*toolfleetv1.Message, error) {
	b := r.p.Backoff()
	for {
		msg, retryable, err := try()
		if err == nil || !retryable || !errors.Is(err, ErrRetryable) {
			return msg, err
		}
		var suggested time.Duration
		var apiErr *APIError
		if errors.As(err, &apiErr) {
			suggested = apiErr.RetryAfter
		}
		d, ok := b.Next(suggested)
		if !ok {
			return msg, err
		}
		if werr := retry.Sleep(ctx, d); werr != nil {
			return nil, errors.Join(err, werr)
		}
	}
}
