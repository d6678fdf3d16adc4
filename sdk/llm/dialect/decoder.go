package dialect

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm"
)

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

// StartInThinking makes the decoder begin inside the dialect's reasoning
// channel, as when the prompt opened it (a chat template that prefills
// <think>): the text up to the channel's close ("plan</think>answer") is
// thinking, as the engines' reasoning parsers read a reply whose prompt
// opened the tag. It reports false, and changes nothing, for a dialect
// without such a channel or once text was written.
func (d *TextDecoder) StartInThinking() bool {
	if d.sb != nil || d.at >= 0 {
		return false
	}
	for k, m := range d.g.markers {
		if m.reasoning {
			// The open marker is read as if the text began with it; it
			// counts for no byte of the text.
			d.buf, d.at, d.m, d.until, d.consumed, d.sc.from = m.open, 0, k, "", -len(m.open), 0
			return true
		}
	}
	return false
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
			d.at, d.m, d.until, d.sc.bal, d.sc.from = 0, m, "", nil, 0
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
