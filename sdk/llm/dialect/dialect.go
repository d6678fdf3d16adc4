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

// TextDecoder reads a dialect's calls out of model text as it streams: text
// outside calls is returned as soon as it cannot be the start of a marker,
// a call as soon as it is complete, and a marker split across chunks is
// held back, never shown. Parse of every dialect is a TextDecoder fed the
// whole text, so batch and streaming results agree. Not safe for
// concurrent use.
type TextDecoder struct {
	// sb holds the text; buf is always a suffix of it (text is dropped
	// from the front), so appending a chunk copies only the chunk.
	sb     *strings.Builder
	g      *grammar
	sc     scanCtx
	buf    string
	at     int // start of an open unit in buf, or -1
	m      int // its marker
	wait   int // with until: where the search for it resumes
	until  string
	line   bool // buf[0] begins a line
	blocks int
	ids    map[string]bool
	err    error
	// consumed counts the bytes of text read to the end of the last
	// returned text or unit.
	consumed int
	// limit > 0 stops reading (the rest of the text is ignored) once that
	// many calls were returned.
	limit int
	// step returns from a Write after each unit that made calls, so text
	// and calls can be passed on in their order (Write("") continues).
	step bool
	// between: the last thing read was a unit, so whitespace up to the next
	// unit is layout between calls (dropped), not text.
	between bool
	// thinking is the reasoning read and not yet taken (Thinking).
	thinking strings.Builder
	// section: a marker that enters a section was read and none that
	// leaves it since.
	section bool
}

// Thinking returns the reasoning read since the last call (gpt-oss
// harmony's analysis channel; empty for the other dialects) and forgets
// it. Reasoning is never part of the text Write returns.
func (d *TextDecoder) Thinking() string {
	s := d.thinking.String()
	d.thinking.Reset()
	return s
}

// NewTextDecoder returns a decoder for p's calls, values typed by tools.
// p must be one of the dialects of this package (not fenced, hermes or
// xml, which are parsed whole at the end of a turn); ok is false otherwise.
func NewTextDecoder(p llm.TextProtocol, tools []*toolfleetv1.ToolDefinition) (d *TextDecoder, ok bool) {
	dp, ok := p.(dialectProtocol)
	if !ok {
		return nil, false
	}
	return &TextDecoder{g: dp.grammar(), sc: scanCtx{tools: tools}, at: -1, line: true, ids: map[string]bool{}}, true
}

// Write feeds a chunk of model text and returns the text that can be shown
// now and the calls completed by it. After an error the decoder is spent.
func (d *TextDecoder) Write(chunk string) (string, []*toolfleetv1.ToolCall, error) {
	if d.err != nil {
		return "", nil, d.err
	}
	if d.limit > 0 && d.sc.calls >= d.limit {
		return "", nil, nil
	}
	d.append(chunk)
	text, calls, err := d.scan(false)
	d.err = err
	return text, calls, err
}

// Close ends the text: held-back text that did not start a marker is
// returned; a call still open is an error matching ErrTruncated, unless
// the dialect recovers it as Parse says.
func (d *TextDecoder) Close() (string, []*toolfleetv1.ToolCall, error) {
	if d.err != nil {
		return "", nil, d.err
	}
	if d.limit > 0 && d.sc.calls >= d.limit {
		return "", nil, nil
	}
	text, calls, err := d.scan(true)
	d.err = err
	if err == nil {
		d.err = errors.New("llm: text decoder closed")
	}
	return text, calls, err
}

// append adds chunk to buf, compacting the builder when most of it was
// dropped already.
func (d *TextDecoder) append(chunk string) {
	if d.sb == nil || d.buf == "" || d.sb.Len()-len(d.buf) > 64<<10 && d.sb.Len()-len(d.buf) > len(d.buf) {
		rest := d.buf
		d.sb = new(strings.Builder)
		d.sb.Grow(len(rest) + len(chunk))
		d.sb.WriteString(rest)
	}
	d.sb.WriteString(chunk)
	all := d.sb.String()
	d.buf = all[len(all)-len(d.buf)-len(chunk):]
}

// Calls is the number of calls returned so far.
func (d *TextDecoder) Calls() int { return d.sc.calls }

func (d *TextDecoder) scan(eof bool) (string, []*toolfleetv1.ToolCall, error) {
	var text strings.Builder
	var calls []*toolfleetv1.ToolCall
	for {
		if d.at < 0 {
			i, m := d.nextMarker()
			if i < 0 {
				keep := 0
				if !eof {
					keep = d.partialMarker()
					if d.between {
						// Whitespace after a unit waits: it is dropped if a
						// unit follows it.
						rest := d.buf[:len(d.buf)-keep]
						keep += len(rest) - len(strings.TrimRight(rest, " \t\r\n"))
					}
				}
				d.emit(&text, len(d.buf)-keep)
				return text.String(), calls, nil
			}
			if d.between && strings.TrimSpace(d.buf[:i]) == "" {
				d.buf, d.consumed = d.buf[i:], d.consumed+i
			} else {
				d.emit(&text, i)
			}
			d.at, d.m, d.until, d.sc.bal = 0, m, "", nil
		}
		s := d.buf
		if d.until != "" && !eof {
			j := strings.Index(s[d.wait:], d.until)
			if j < 0 {
				d.wait = max(0, len(s)-len(d.until)+1)
				if len(s) > maxUnitBytes {
					return text.String(), calls, d.blockErr("", fmt.Errorf("unfinished after %d bytes", maxUnitBytes))
				}
				return text.String(), calls, nil
			}
		}
		d.sc.pending = 0
		u, err := d.g.markers[d.m].read(s, eof, &d.sc)
		if eof && d.g.dropCutTail && d.sc.calls > 0 && (errors.Is(err, errCut) || err == nil && u.n == 0 && !u.plain) {
			// A call cut off after complete ones: dropped, never shown.
			d.consumed += len(d.buf)
			d.buf, d.at = "", -1
			return text.String(), calls, nil
		}
		if err != nil {
			return text.String(), calls, d.blockErr(u.name, err)
		}
		switch {
		case u.plain:
			// The marker's first byte is text; scanning resumes after it.
			d.at = -1
			d.emit(&text, 1)
			d.between = false
			continue
		case u.n == 0:
			if eof {
				return text.String(), calls, d.blockErr(u.name, errCut)
			}
			if len(s) > maxUnitBytes {
				return text.String(), calls, d.blockErr(u.name, fmt.Errorf("unfinished after %d bytes", maxUnitBytes))
			}
			d.until, d.wait = u.until, len(s)-len(u.until)+1
			if u.until != "" {
				d.wait = max(0, d.wait)
			}
			return text.String(), calls, nil
		}
		if len(u.calls) > 0 {
			d.blocks++
		}
		if mk := d.g.markers[d.m]; mk.enters || mk.leaves {
			d.section = mk.enters
		}
		text.WriteString(u.text)
		d.thinking.WriteString(u.think)
		d.between = u.text == ""
		if d.limit > 0 && len(u.calls) > d.limit-d.sc.calls {
			u.calls = u.calls[:d.limit-d.sc.calls] // the rest is not read
		}
		for _, c := range u.calls {
			d.sc.calls++
			id := c.id
			if id == "" {
				id = "call_" + strconv.Itoa(d.sc.calls)
			}
			for base, n := id, 2; d.ids[id]; n++ {
				id = base + "_" + strconv.Itoa(n)
			}
			d.ids[id] = true
			calls = append(calls, &toolfleetv1.ToolCall{Id: id, Name: c.name, Arguments: c.args})
		}
		d.line = strings.HasSuffix(s[:u.n], "\n")
		d.buf = s[u.n:]
		d.consumed += u.n
		d.at = -1
		if len(u.calls) > 0 && (d.step || d.limit > 0 && d.sc.calls >= d.limit) {
			return text.String(), calls, nil
		}
	}
}

// emit moves the first n bytes of buf to text.
func (d *TextDecoder) emit(text *strings.Builder, n int) {
	if n <= 0 {
		return
	}
	text.WriteString(d.buf[:n])
	d.line = d.buf[n-1] == '\n'
	if d.between && strings.TrimSpace(d.buf[:n]) != "" {
		d.between = false
	}
	d.buf = d.buf[n:]
	d.consumed += n
}

func (d *TextDecoder) blockErr(call string, err error) error {
	return &BlockError{Protocol: d.g.name, Block: d.blocks + 1, Call: call, Err: err}
}

// nextMarker finds the earliest marker in buf (the longest one where two
// begin at the same byte). Candidates are found by their first bytes, so a
// scan is linear in the text.
func (d *TextDecoder) nextMarker() (at, m int) {
	for from := 0; from < len(d.buf); {
		i := strings.IndexAny(d.buf[from:], d.g.firsts)
		if i < 0 {
			return -1, 0
		}
		i += from
		m = -1
		for k, mk := range d.g.markers {
			if strings.HasPrefix(d.buf[i:], mk.open) && (!mk.lineStart || d.startsLine(i)) && (!mk.inSection || d.section) && (m < 0 || len(mk.open) > len(d.g.markers[m].open)) {
				m = k
			}
		}
		if m >= 0 {
			return i, m
		}
		from = i + 1
	}
	return -1, 0
}

// startsLine reports whether only spaces or tabs stand between the start
// of a line and buf[i].
func (d *TextDecoder) startsLine(i int) bool {
	j := i
	for j > 0 && (d.buf[j-1] == ' ' || d.buf[j-1] == '\t') {
		j--
	}
	if j == 0 {
		return d.line
	}
	return d.buf[j-1] == '\n'
}

// partialMarker is the length of the longest suffix of buf that is a
// proper prefix of a marker (held back until the next chunk decides).
func (d *TextDecoder) partialMarker() int {
	opens := make([]string, 0, len(d.g.markers))
	for _, m := range d.g.markers {
		if !m.inSection || d.section {
			opens = append(opens, m.open)
		}
	}
	return partialSuffix(d.buf, opens)
}

// partialSuffix is the length of the longest suffix of s that is a proper
// prefix of one of tags.
func partialSuffix(s string, tags []string) int {
	longest := 0
	for _, tag := range tags {
		for n := min(len(tag)-1, len(s)); n > longest; n-- {
			if strings.HasSuffix(s, tag[:n]) {
				longest = n
				break
			}
		}
	}
	return longest
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
	d, _ := NewTextDecoder(p, tools)
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
