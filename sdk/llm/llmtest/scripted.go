package llmtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"google.golang.org/protobuf/proto"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/internal/canon"
)

// ScriptTurn is one reply of a Scripted model.
type ScriptTurn struct {
	// Reply is returned as the assistant's turn (cloned each time).
	Reply *toolfleetv1.Message
	// Err, when set, is returned instead of a reply.
	Err error
	// Check, when set, inspects the request first; its error fails the turn,
	// which is how a script asserts what the model was sent.
	Check func(*llm.Request) error
	// Render, when set, builds the reply from the request instead of Reply
	// (e.g. a script file's turn, whose arguments name earlier results).
	Render func(*llm.Request) (*toolfleetv1.Message, error)
}

// SayText is a turn that answers with text and ends the turn.
func SayText(text string) ScriptTurn {
	m := llm.NewMessage(toolfleetv1.Role_ROLE_ASSISTANT, llm.Text(text))
	m.StopReason = llm.StopEndTurn
	return ScriptTurn{Reply: m}
}

// CallTools is a turn that makes native tool calls, with optional text
// first. Calls are built with CallPart.
func CallTools(text string, calls ...*toolfleetv1.Part) ScriptTurn {
	m := llm.NewMessage(toolfleetv1.Role_ROLE_ASSISTANT)
	if text != "" {
		m.Parts = append(m.Parts, llm.Text(text))
	}
	m.Parts = append(m.Parts, calls...)
	m.StopReason = llm.StopToolCalls
	return ScriptTurn{Reply: m}
}

// WriteCalls is a turn that writes the calls as text in protocol p, the
// way a small model without native tool calls would.
func WriteCalls(p llm.TextProtocol, text string, calls ...*toolfleetv1.Part) ScriptTurn {
	parts := []string{}
	if text != "" {
		parts = append(parts, text)
	}
	for _, c := range calls {
		parts = append(parts, p.RenderCall(c.GetToolCall()))
	}
	return SayText(strings.Join(parts, "\n"))
}

// Scripted is a deterministic Model that replies from a script, one turn
// per call, for tests and demos. It is safe for concurrent use; turns are
// consumed in call order.
type Scripted struct {
	// ChunkSize is how many bytes of text each streamed delta carries (default 8).
	ChunkSize int

	mu       sync.Mutex
	turns    []ScriptTurn
	requests []*llm.Request
}

// NewScripted returns a model that plays turns in order and then fails
// with ErrScriptExhausted.
func NewScripted(turns ...ScriptTurn) *Scripted { return &Scripted{turns: turns} }

// Requests returns the requests received so far.
func (s *Scripted) Requests() []*llm.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*llm.Request(nil), s.requests...)
}

// Remaining is the number of unplayed turns.
func (s *Scripted) Remaining() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.turns)
}

func (s *Scripted) next(ctx context.Context, req *llm.Request) (*toolfleetv1.Message, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, req)
	if len(s.turns) == 0 {
		return nil, fmt.Errorf("%w after %d turns", llm.ErrScriptExhausted, len(s.requests)-1)
	}
	turn := s.turns[0]
	s.turns = s.turns[1:]
	if turn.Check != nil {
		if err := turn.Check(req); err != nil {
			return nil, fmt.Errorf("llm: scripted turn %d: %w", len(s.requests), err)
		}
	}
	if turn.Err != nil {
		return nil, turn.Err
	}
	reply := turn.Reply
	if turn.Render != nil {
		r, err := turn.Render(req)
		if err != nil {
			return nil, err
		}
		reply = r
	}
	if reply == nil {
		return nil, errors.New("llm: scripted turn has neither Reply nor Err")
	}
	msg := proto.Clone(reply).(*toolfleetv1.Message)
	if msg.Model == "" {
		msg.Model = "scripted"
	}
	return msg, nil
}

// Complete implements Model.
func (s *Scripted) Complete(ctx context.Context, req *llm.Request) (*toolfleetv1.Message, error) {
	msg, err := s.next(ctx, req)
	if err != nil {
		return nil, err
	}
	return llm.FinishTurn(req, msg), nil
}

// Stream implements Model: text is sent in ChunkSize pieces, each call as
// a name delta and two argument fragments, then usage and stop reason; the
// result is assembled from those deltas like any provider stream.
func (s *Scripted) Stream(ctx context.Context, req *llm.Request, onDelta func(llm.Delta) error) (*toolfleetv1.Message, error) {
	msg, err := s.next(ctx, req)
	if err != nil {
		return nil, err
	}
	return StreamReply(ctx, req, msg, s.ChunkSize, onDelta)
}

// StreamReply streams a finished reply the way a provider would: text in
// size-byte pieces (default 8), each call as a name delta and two argument
// fragments, then usage and stop reason; the result is assembled from those
// deltas like any provider stream.
func StreamReply(ctx context.Context, req *llm.Request, msg *toolfleetv1.Message, size int, onDelta func(llm.Delta) error) (*toolfleetv1.Message, error) {
	if size <= 0 {
		size = 8
	}
	var asm llm.Assembler
	onDelta = llm.FirstCallDeltas(req, onDelta)
	emit := func(d llm.Delta) error {
		asm.Add(d)
		if onDelta == nil {
			return nil
		}
		return onDelta(d)
	}
	deltas := []llm.Delta{{Model: msg.GetModel()}}
	calls := 0
	for _, p := range msg.GetParts() {
		switch k := p.GetKind().(type) {
		case *toolfleetv1.Part_Text:
			for t := k.Text; t != ""; {
				n := min(size, len(t))
				deltas = append(deltas, llm.Delta{Text: t[:n]})
				t = t[n:]
			}
		case *toolfleetv1.Part_Thinking:
			deltas = append(deltas, llm.Delta{Thinking: k.Thinking.GetText(), ThinkingSignature: k.Thinking.GetSignature()})
		case *toolfleetv1.Part_ToolCall:
			c := k.ToolCall
			args, free := string(canon.EncodeArguments(c.GetArguments())), c.Input != nil
			if free {
				args = c.GetInput()
			}
			half := len(args) / 2
			deltas = append(deltas,
				llm.Delta{ToolCall: &llm.ToolCallDelta{Index: calls, ID: c.GetId(), Name: c.GetName(), Signature: c.GetSignature(), Caller: c.GetCaller(), FreeText: free}},
				llm.Delta{ToolCall: &llm.ToolCallDelta{Index: calls, Arguments: args[:half], FreeText: free}},
				llm.Delta{ToolCall: &llm.ToolCallDelta{Index: calls, Arguments: args[half:], FreeText: free}})
			calls++
		case *toolfleetv1.Part_ProviderBlock:
			deltas = append(deltas, llm.Delta{ProviderBlock: k.ProviderBlock})
		}
	}
	if msg.GetContainer() != "" {
		deltas = append(deltas, llm.Delta{Container: msg.GetContainer()})
	}
	if msg.GetUsage() != nil {
		deltas = append(deltas, llm.Delta{Usage: msg.GetUsage()})
	}
	deltas = append(deltas, llm.Delta{StopReason: msg.GetStopReason()})
	for _, d := range deltas {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := emit(d); err != nil {
			if errors.Is(err, llm.StopStream) {
				break
			}
			return nil, err
		}
	}
	out, err := asm.Message()
	if err != nil {
		return nil, err
	}
	return llm.FinishTurn(req, out), nil
}
