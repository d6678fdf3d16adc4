package dialect

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/internal/canon"
)

// ErrTruncated matches a *BlockError whose call was cut off before its end
// (the reply hit max_tokens, or the stream broke): the call is never
// executed. It also matches ErrMalformed.
var ErrTruncated = errors.New("llm: tool call cut off before its end; not executed")

// maxUnitBytes bounds the text a dialect scanner holds for one unfinished
// unit (a call, a header): a model that opens a call and never closes it
// fails the turn instead of growing the buffer without bound.
const maxUnitBytes = 8 << 20 // the limit the core puts on one SSE line

// A marker opens a unit of a dialect: a call, a section boundary, a header.
type marker struct {
	open string
	// lineStart: the marker counts only at the start of the text or of a
	// line (spaces and tabs may precede it), e.g. a bare JSON call.
	lineStart bool
	// read reads the unit at the start of s (s begins with open). eof says
	// no more text will come. It returns unit.n == 0 when it needs more
	// text (never at eof: an unfinished unit is then an error, normally
	// errCut).
	read func(s string, eof bool, sc *scanCtx) (unit, error)
	// layout: the marker never makes a call (a section boundary, an
	// end-of-message token).
	layout bool
	// inSection: the marker counts only inside a section (after a marker
	// that enters one and before the one that leaves it); outside, it is
	// text, as the serving engines read it.
	inSection bool
	// enters and leaves: the unit opens or closes a section.
	enters, leaves bool
	// reasoning: the unit is the dialect's reasoning channel, the one a
	// prompt may open (TextDecoder.StartInThinking).
	reasoning bool
}

// unit is what a marker's read found.
type unit struct {
	n     int        // bytes of s the unit spans; 0: more text needed
	text  string     // text the unit shows (harmony's answer channel)
	think string     // reasoning the unit holds (harmony's analysis channel)
	calls []*rawCall // calls the unit made, in order
	plain bool       // not a unit after all: the marker is text
	until string     // with n == 0: read again once this appears (a speed-up)
	name  string     // the call being read, for errors
}

// rawCall is a call as a dialect read it; the scanner numbers it.
type rawCall struct {
	id, name string
	args     *structpb.Struct
}

// errCut is what a read returns at eof for an unfinished unit.
var errCut = ErrTruncated

// scanCtx is what a read may use: the tools (to type values) and the call
// number the next call gets.
type scanCtx struct {
	tools   []*toolfleetv1.ToolDefinition
	calls   int // calls returned so far
	pending int // calls the current read has made so far
	// bal keeps, per start offset, how far the bracket scans of the unit
	// being read got: a unit only grows while it is read, so each scan
	// resumes where it stopped and a long call streamed in small chunks
	// is scanned once, not once per chunk.
	bal map[int]*balance
	// from is where a read of the unit stopped searching (thinkUntil).
	from int
}

// balance is the progress of a scan for the end of a bracketed value.
type balance struct {
	pos, depth, end int
	quote           byte
	esc             bool
	quotes          string
}

// balanced returns the length of the bracketed value ("{…}", "[…]",
// "(…)") that starts at s[at], strings quoted by any byte of quotes
// skipped with their backslash escapes, or -1 when s ends first.
func (c *scanCtx) balanced(s string, at int, quotes string) int {
	if c.bal == nil {
		c.bal = map[int]*balance{}
	}
	b := c.bal[at]
	if b == nil || b.quotes != quotes {
		b = &balance{pos: at, quotes: quotes, end: -1}
		c.bal[at] = b
	}
	for ; b.end < 0 && b.pos < len(s); b.pos++ {
		ch := s[b.pos]
		if b.quote != 0 {
			switch {
			case b.esc:
				b.esc = false
			case ch == '\\':
				b.esc = true
			case ch == b.quote:
				b.quote = 0
			}
			continue
		}
		switch {
		case strings.IndexByte(quotes, ch) >= 0:
			b.quote = ch
		case ch == '{' || ch == '[' || ch == '(':
			b.depth++
		case ch == '}' || ch == ']' || ch == ')':
			if b.depth--; b.depth == 0 {
				b.end = b.pos + 1 - at
			}
		}
	}
	return b.end
}

// callName is the "NAME (call_N)" label errors give the next call.
func (c *scanCtx) callName(name string) string {
	return name + " (call_" + strconv.Itoa(c.calls+c.pending+1) + ")"
}

// grammar is a dialect: its name and the markers that open its units.
type grammar struct {
	name    string
	markers []marker
	firsts  string // the first bytes of the markers
	// dropCutTail: at the end of the text, a call cut off after complete
	// calls is dropped (the complete ones stand) instead of failing the
	// reply; a cut call with no complete call before it is ErrTruncated.
	dropCutTail bool
}

func newGrammar(name string, markers ...marker) *grammar {
	g := &grammar{name: name, markers: markers}
	for _, m := range markers {
		if !strings.Contains(g.firsts, m.open[:1]) {
			g.firsts += m.open[:1]
		}
	}
	return g
}

// dialectProtocol is a TextProtocol built on the shared scanner.
type dialectProtocol interface {
	llm.TextProtocol
	grammar() *grammar
}

// parseDialect is Parse for every dialect: the decoder fed the whole text;
// the remaining text is trimmed.
func parseDialect(p dialectProtocol, text string, tools []*toolfleetv1.ToolDefinition) (string, []*toolfleetv1.ToolCall, error) {
	rest, _, calls, err := parseDialectThinking(p, text, tools)
	return rest, calls, err
}

// parseDialectThinking is parseDialect that also returns the reasoning
// the text held (trimmed).
func parseDialectThinking(p dialectProtocol, text string, tools []*toolfleetv1.ToolDefinition) (rest, thinking string, calls []*toolfleetv1.ToolCall, err error) {
	return parseDialectFrom(p, text, tools, false)
}

// parseDialectFrom is parseDialectThinking for a reply that may begin
// inside the reasoning channel the prompt opened (thinkingOpen).
func parseDialectFrom(p dialectProtocol, text string, tools []*toolfleetv1.ToolDefinition, thinkingOpen bool) (rest, thinking string, calls []*toolfleetv1.ToolCall, err error) {
	d, _ := NewTextDecoder(p, tools)
	if thinkingOpen {
		d.StartInThinking()
	}
	shown, calls, err := d.Write(text)
	if err != nil {
		return "", "", nil, err
	}
	tail, more, err := d.Close()
	if err != nil {
		return "", "", nil, err
	}
	return strings.TrimSpace(shown + tail), strings.TrimSpace(d.Thinking()), append(calls, more...), nil
}

// --- pieces the dialects share ---

// alone is a marker that is a unit by itself: a section boundary, an
// end-of-message token. It shows nothing and makes no call.
func alone(open string) marker {
	return marker{open: open, layout: true, read: func(string, bool, *scanCtx) (unit, error) { return unit{n: len(open)}, nil }}
}

// closedBy is a marker whose unit ends after the first close following
// open; body parses the text between them.
func closedBy(open, close string, body func(inner string, sc *scanCtx) ([]*rawCall, error)) marker {
	return marker{open: open, read: func(s string, eof bool, sc *scanCtx) (unit, error) {
		end := strings.Index(s[len(open):], close)
		if end < 0 {
			u := unit{until: close, name: guessName(s[len(open):])}
			if eof {
				return u, errCut
			}
			return u, nil
		}
		inner := s[len(open) : len(open)+end]
		calls, err := body(inner, sc)
		if err != nil {
			return unit{name: guessName(inner)}, err
		}
		return unit{n: len(open) + end + len(close), calls: calls}, nil
	}}
}

// guessName reads a tool name at the start of a call's text, for errors.
func guessName(s string) string {
	s = strings.TrimSpace(s[:min(len(s), 512)]) // the name is near the start; never scan a whole call
	s = strings.TrimPrefix(s, "functions.")
	if m := namedCall.FindStringSubmatch(s); m != nil {
		return m[1]
	}
	n := 0
	for n < len(s) && n < 64 && isNameByte(s[n]) {
		n++
	}
	return s[:n]
}

func isNameByte(b byte) bool {
	return b == '_' || b == '-' || b == '.' || b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z'
}

// toolName checks a name a dialect read.
func toolName(name string) (string, error) {
	name = strings.TrimSpace(name)
	if name == "" || len(name) > 128 {
		return "", fmt.Errorf("bad function name %.40q", name)
	}
	for i := 0; i < len(name); i++ {
		if !isNameByte(name[i]) {
			return "", fmt.Errorf("bad function name %.40q", name)
		}
	}
	return name, nil
}

// jsonArgs decodes a dialect's JSON arguments for a call.
func jsonArgs(sc *scanCtx, name, raw string) (*rawCall, error) {
	name, err := toolName(name)
	if err != nil {
		return nil, err
	}
	args, err := llm.DecodeArguments(sc.callName(name), []byte(raw))
	if err != nil {
		return nil, err
	}
	return &rawCall{name: name, args: args}, nil
}

// jsonAfter reads the JSON object or array that starts s[at:] after
// spaces: start is where it begins and end where it ends, relative to at
// (end 0 when s ends first); ok is false when something else is there.
func jsonAfter(sc *scanCtx, s string, at int) (start, end int, ok bool) {
	t := s[at:]
	start = len(t) - len(strings.TrimLeft(t, " \t\r\n"))
	if start == len(t) {
		return start, 0, true
	}
	if t[start] != '{' && t[start] != '[' {
		return start, 0, false
	}
	n := sc.balanced(s, at+start, `"`)
	if n < 0 {
		return start, 0, true
	}
	return start, start + n, true
}

// instructions is the augmenter text every dialect shares: how to write a
// call, whether several may follow each other, and the tool catalog.
func instructions(shape string, tools []*toolfleetv1.ToolDefinition) string {
	return "You can call tools. To call one, write exactly:\n" + shape + "\n" +
		"You may make several calls in a row. After your calls, stop and wait: the results come back in the next message.\n" +
		"Tools:\n" + toolCatalog(tools)
}

// argsJSON is a call's arguments as compact JSON.
func argsJSON(c *toolfleetv1.ToolCall) string { return string(canon.CallArguments(c)) }

// enters marks a marker whose unit opens a section.
func enters(m marker) marker { m.enters = true; return m }

// leaves marks a marker whose unit closes a section; outside one it is text.
func leaves(m marker) marker { m.leaves, m.inSection = true, true; return m }

// within marks a marker that counts only inside a section.
func within(m marker) marker { m.inSection = true; return m }

// endedBy lets a closedBy unit that the text ends inside stand when what
// it holds is complete without its close: complete returns that part of
// the unit's inner text (ok false: the unit was cut off), and body reads it.
func endedBy(m marker, complete func(inner string) (string, bool), body func(string, *scanCtx) ([]*rawCall, error)) marker {
	read := m.read
	m.read = func(s string, eof bool, sc *scanCtx) (unit, error) {
		u, err := read(s, eof, sc)
		if !eof || !errors.Is(err, errCut) {
			return u, err
		}
		inner, ok := complete(s[len(m.open):])
		if !ok {
			return u, err
		}
		calls, err := body(inner, sc)
		if err != nil {
			return unit{name: guessName(inner)}, err
		}
		return unit{n: len(s), calls: calls}, nil
	}
	return m
}

// textUnlessClosed makes a unit that the text ends inside text, not an
// error: its marker and what follows are shown as they are.
func textUnlessClosed(m marker) marker {
	read := m.read
	m.read = func(s string, eof bool, sc *scanCtx) (unit, error) {
		u, err := read(s, eof, sc)
		if eof && errors.Is(err, errCut) {
			return unit{plain: true}, nil
		}
		return u, err
	}
	return m
}
