package llm

import (
	"errors"
	"strconv"
	"strings"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// Delta is one increment of a streamed model turn. Exactly the fields the
// provider sent are set.
type Delta struct {
	Text              string
	Thinking          string
	ThinkingSignature []byte
	ToolCall          *ToolCallDelta
	Usage             *toolfleetv1.Usage
	StopReason        string
	Model             string
	// ProviderBlock is a whole provider block carried uninterpreted
	// (e.g. Anthropic's server_tool_use), in its place in the message.
	ProviderBlock *toolfleetv1.ProviderBlock
	// Container is the provider execution container of the turn.
	Container string
}

// Empty reports whether d carries nothing.
func (d Delta) Empty() bool {
	return d.Text == "" && d.Thinking == "" && d.ThinkingSignature == nil && d.ToolCall == nil &&
		d.Usage == nil && d.StopReason == "" && d.Model == "" && d.ProviderBlock == nil && d.Container == ""
}

// ToolCallDelta is a fragment of a tool call. Index is the provider's slot
// for the call (-1 when it sent none); ID and Name arrive once or repeated;
// Arguments is a fragment of the JSON arguments text.
type ToolCallDelta struct {
	Index     int
	ID        string
	Name      string
	Arguments string
	Signature []byte
	// Caller is set on a call made by the provider's code sandbox.
	Caller *toolfleetv1.ToolCaller
	// FreeText marks a call whose input is free text (an OpenAI custom
	// tool call): Arguments then carries fragments of that text, and the
	// call is assembled with ToolCall.input instead of arguments.
	FreeText bool
}

// Assembler joins deltas into a message. Tool calls are keyed by index:
// parallel calls may interleave; a delta with index -1 continues the call
// with the same id, or the latest call when it has no id; a new id at a used
// index starts a new call (providers that reuse index 0); repeated ids and
// names are not duplicated; an initial "{}" is replaced by later fragments
// (Anthropic sends the empty input before its input_json_delta events).
type Assembler struct {
	parts     []*assembling
	byIndex   map[int]*assembling
	usage     *toolfleetv1.Usage
	stop      string
	model     string
	container string
}

type assembling struct {
	kind      int // 0 text, 1 thinking, 2 tool call, 3 provider block
	text      strings.Builder
	signature []byte
	id, name  string
	args      strings.Builder
	index     int
	caller    *toolfleetv1.ToolCaller
	freeText  bool
	block     *toolfleetv1.ProviderBlock
}

// Add records one delta.
func (a *Assembler) Add(d Delta) {
	if a.byIndex == nil {
		a.byIndex = map[int]*assembling{}
	}
	if d.Text != "" {
		a.appendText(0, d.Text)
	}
	if d.Thinking != "" || d.ThinkingSignature != nil {
		p := a.appendText(1, d.Thinking)
		if d.ThinkingSignature != nil {
			p.signature = append(p.signature, d.ThinkingSignature...)
		}
	}
	if tc := d.ToolCall; tc != nil {
		a.addCall(tc)
	}
	if d.Usage != nil {
		a.usage = mergeUsage(a.usage, d.Usage)
	}
	if d.StopReason != "" {
		a.stop = d.StopReason
	}
	if d.Model != "" {
		a.model = d.Model
	}
	if d.ProviderBlock != nil {
		a.parts = append(a.parts, &assembling{kind: 3, block: d.ProviderBlock})
	}
	if d.Container != "" {
		a.container = d.Container
	}
}

func (a *Assembler) appendText(kind int, s string) *assembling {
	if n := len(a.parts); n > 0 && a.parts[n-1].kind == kind {
		a.parts[n-1].text.WriteString(s)
		return a.parts[n-1]
	}
	p := &assembling{kind: kind}
	p.text.WriteString(s)
	a.parts = append(a.parts, p)
	return p
}

// callOrdinal records a call fragment and returns the 1-based position,
// among the calls, of the call it belongs to.
func (a *Assembler) callOrdinal(tc *ToolCallDelta) int {
	if a.byIndex == nil {
		a.byIndex = map[int]*assembling{}
	}
	c := a.addCall(tc)
	n := 0
	for _, p := range a.parts {
		if p.kind == 2 {
			n++
			if p == c {
				break
			}
		}
	}
	return n
}

func (a *Assembler) addCall(tc *ToolCallDelta) *assembling {
	var c *assembling
	switch {
	case tc.Index >= 0:
		c = a.byIndex[tc.Index]
		if c != nil && tc.ID != "" && c.id != "" && tc.ID != c.id {
			c = nil
		}
	case tc.ID != "":
		for _, p := range a.parts {
			if p.kind == 2 && p.id == tc.ID {
				c = p
			}
		}
	default:
		for i := len(a.parts) - 1; i >= 0 && c == nil; i-- {
			if a.parts[i].kind == 2 {
				c = a.parts[i]
			}
		}
	}
	if c == nil {
		c = &assembling{kind: 2, index: tc.Index}
		a.parts = append(a.parts, c)
		if tc.Index >= 0 {
			a.byIndex[tc.Index] = c
		}
	}
	if c.id == "" {
		c.id = tc.ID
	}
	switch {
	case c.name == "":
		c.name = tc.Name
	case tc.Name != "" && tc.Name != c.name && !strings.HasSuffix(c.name, tc.Name):
		c.name += tc.Name // a provider that streams the name in pieces
	}
	if tc.FreeText {
		c.freeText = true
	}
	if tc.Arguments != "" {
		if !c.freeText && c.args.String() == "{}" && strings.HasPrefix(strings.TrimSpace(tc.Arguments), "{") {
			c.args.Reset()
		}
		c.args.WriteString(tc.Arguments)
	}
	if tc.Signature != nil {
		c.signature = tc.Signature
	}
	if tc.Caller != nil {
		c.caller = tc.Caller
	}
	return c
}

// Message returns the assembled assistant message. Calls without an id get
// "call_<n>"; a call whose arguments do not decode fails with an
// *ArgumentsError naming it.
func (a *Assembler) Message() (*toolfleetv1.Message, error) {
	msg := &toolfleetv1.Message{Role: toolfleetv1.Role_ROLE_ASSISTANT, Usage: a.usage, StopReason: a.stop, Model: a.model, Container: a.container}
	calls := 0
	for _, p := range a.parts {
		switch p.kind {
		case 0:
			msg.Parts = append(msg.Parts, Text(p.text.String()))
		case 1:
			msg.Parts = append(msg.Parts, &toolfleetv1.Part{Kind: &toolfleetv1.Part_Thinking{Thinking: &toolfleetv1.Thinking{Text: p.text.String(), Signature: p.signature}}})
		case 2:
			calls++
			id := p.id
			if id == "" {
				id = "call_" + strconv.Itoa(calls)
			}
			if p.freeText {
				input := p.args.String()
				msg.Parts = append(msg.Parts, &toolfleetv1.Part{Kind: &toolfleetv1.Part_ToolCall{ToolCall: &toolfleetv1.ToolCall{Id: id, Name: p.name, Input: &input, Signature: p.signature, Caller: p.caller}}})
				continue
			}
			args, err := DecodeArgumentString(p.name+" ("+id+")", p.args.String())
			if err != nil {
				return nil, err
			}
			msg.Parts = append(msg.Parts, &toolfleetv1.Part{Kind: &toolfleetv1.Part_ToolCall{ToolCall: &toolfleetv1.ToolCall{Id: id, Name: p.name, Arguments: args, Signature: p.signature, Caller: p.caller}}})
		case 3:
			msg.Parts = append(msg.Parts, &toolfleetv1.Part{Kind: &toolfleetv1.Part_ProviderBlock{ProviderBlock: p.block}})
		}
	}
	if calls > 0 && (msg.StopReason == "" || msg.StopReason == StopEndTurn) {
		msg.StopReason = StopToolCalls
	}
	return msg, nil
}

func mergeUsage(a, b *toolfleetv1.Usage) *toolfleetv1.Usage {
	if a == nil {
		a = &toolfleetv1.Usage{}
	}
	// Providers report cumulative counts in their last event; the larger
	// value wins so partial reports never lower a total.
	a.InputTokens = max(a.InputTokens, b.InputTokens)
	a.OutputTokens = max(a.OutputTokens, b.OutputTokens)
	a.CacheReadTokens = max(a.CacheReadTokens, b.CacheReadTokens)
	a.CacheWriteTokens = max(a.CacheWriteTokens, b.CacheWriteTokens)
	return a
}

// errStreamDone lets an onDelta callback stop reading early without an error.
var errStreamDone = errors.New("llm: stream done")

// StopStream, returned from an onDelta callback, ends a stream early (a
// Model's Stream, sdk/llm/wire's DecodeStream) and still assembles the
// message (used to cut a text-protocol stream after its closing tag).
var StopStream = errStreamDone
