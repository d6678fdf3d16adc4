package dialect

import (
	"strings"

	"github.com/toolfleet/toolfleet/sdk/llm"
)

// TagFilter sits on a streamed text channel of a model that may write
// text-protocol blocks. Text outside blocks passes through as it comes;
// a possible start of an opening tag at the end of a chunk is held back
// until the next chunk decides, and a whole block is withheld (it is parsed
// from the full text once the turn ends).
type TagFilter struct {
	protocols []llm.TextProtocol
	buf       string
	close     string // closing tag of the open block; "" outside blocks
	blocks    int
}

// NewTagFilter watches for the blocks of protocols (the three prompt
// protocols if none; a Dialect streams through a TextDecoder instead).
func NewTagFilter(protocols ...llm.TextProtocol) *TagFilter {
	if len(protocols) == 0 {
		protocols = promptProtocols()
	}
	return &TagFilter{protocols: protocols}
}

// Write feeds a text delta and returns the text that can be shown now.
func (f *TagFilter) Write(s string) string {
	f.buf += s
	var out strings.Builder
	for {
		if f.close != "" {
			end := strings.Index(f.buf, f.close)
			if end < 0 {
				return out.String()
			}
			f.buf = f.buf[end+len(f.close):]
			f.close = ""
			f.blocks++
			continue
		}
		start, p := -1, llm.TextProtocol(nil)
		for _, proto := range f.protocols {
			if i := strings.Index(f.buf, proto.OpenTag()); i >= 0 && (start < 0 || i < start) {
				start, p = i, proto
			}
		}
		if start >= 0 {
			out.WriteString(f.buf[:start])
			f.buf = f.buf[start+len(p.OpenTag()):]
			f.close = p.CloseTag()
			continue
		}
		keep := f.partialTag()
		out.WriteString(f.buf[:len(f.buf)-keep])
		f.buf = f.buf[len(f.buf)-keep:]
		return out.String()
	}
}

// partialTag returns the length of the longest suffix of buf that is a
// proper prefix of an opening tag.
func (f *TagFilter) partialTag() int {
	tags := make([]string, len(f.protocols))
	for i, p := range f.protocols {
		tags[i] = p.OpenTag()
	}
	return partialSuffix(f.buf, tags)
}

// Blocks is the number of complete blocks seen. A caller whose model makes
// one call per turn can stop reading the stream once it is 1.
func (f *TagFilter) Blocks() int { return f.blocks }

// InBlock reports whether an opened block has not been closed yet.
func (f *TagFilter) InBlock() bool { return f.close != "" }

// Flush returns held-back text that turned out not to start a tag. Text of
// an unclosed block is not returned: the parser reports it as malformed.
func (f *TagFilter) Flush() string {
	if f.close != "" {
		return ""
	}
	s := f.buf
	f.buf = ""
	return s
}
