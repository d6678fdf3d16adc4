package llm

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm/internal/canon"
)

// fuzzParser checks a text parser's contract on any input: it never
// panics, every failure is typed (ErrMalformed or ErrInvalidArguments),
// every call it returns is complete, and rendering the calls in the same
// protocol parses back to the same calls.
func fuzzParser(t *testing.T, p TextProtocol, text string) {
	tools := []*toolfleetv1.ToolDefinition{typedTool(t)}
	rest, calls, err := p.Parse(text, tools)
	if err != nil {
		if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrInvalidArguments) {
			t.Fatalf("untyped error %v", err)
		}
		return
	}
	if len(calls) == 0 && rest != strings.TrimSpace(text) && p.Name() != "xml" {
		t.Fatalf("no calls but text changed: %q -> %q", text, rest)
	}
	var rendered []string
	for _, c := range calls {
		if c.GetName() == "" || c.GetId() == "" || c.GetArguments() == nil {
			t.Fatalf("incomplete call %v", c)
		}
		rendered = append(rendered, p.RenderCall(c))
	}
	if len(calls) == 0 {
		return
	}
	_, again, err := p.Parse(strings.Join(rendered, "\n"), tools)
	if err != nil {
		// Names or values the protocol cannot carry (a name with ">", a
		// string parameter that is JSON-like in the XML protocol) may not
		// survive a second trip; they must still fail loudly, not vanish.
		if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrInvalidArguments) {
			t.Fatalf("re-parse: untyped error %v", err)
		}
		return
	}
	if len(again) != len(calls) {
		t.Fatalf("re-parse found %d calls, want %d", len(again), len(calls))
	}
	for i := range calls {
		if again[i].GetName() != calls[i].GetName() {
			t.Fatalf("re-parse name %q, want %q", again[i].GetName(), calls[i].GetName())
		}
		if p.Name() != "xml" && !proto.Equal(again[i].GetArguments(), calls[i].GetArguments()) {
			t.Fatalf("re-parse arguments %v, want %v", again[i].GetArguments(), calls[i].GetArguments())
		}
	}
}

func FuzzFenced(f *testing.F) {
	f.Add("~~~tool_call\n{\"name\":\"A\",\"arguments\":{\"x\":1}}\n~~~")
	f.Add("text\n~~~tool_call\n{\"name\":\"A\",\"arguments\":\"{}\",\"id\":\"z\"}\n~~~\n~~~tool_call\n{\"name\":\"B\"}\n~~~\n")
	f.Add("~~~tool_call\n{\"name\":\"A\",\"arguments\":\"\"}\n~~~")
	f.Add("~~~tool_call\n{")
	f.Fuzz(func(t *testing.T, text string) { fuzzParser(t, Fenced{}, text) })
}

func FuzzHermes(f *testing.F) {
	f.Add(`<tool_call>{"name":"A","arguments":{"x":[1,2]}}</tool_call>`)
	f.Add("Sure.\n<tool_call>\n{\"name\": \"A\", \"parameters\": {}}\n</tool_call>\n<tool_call>{\"name\":\"B\",\"arguments\":\"{\\\"k\\\":true}\"}</tool_call>")
	f.Add(`<tool_call>{"name":"A"`)
	f.Fuzz(func(t *testing.T, text string) { fuzzParser(t, Hermes{}, text) })
}

func FuzzXMLFunction(f *testing.F) {
	f.Add("<function=Weather_Forecast>\n<parameter=city>\nOslo\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>")
	f.Add("<tool_call>\n<function=X>\n<parameter=a>\n[1,2]\n</parameter>\n</function>\n</tool_call>")
	f.Add("<function=Weather_Forecast><parameter=metric>true</parameter><parameter=id>\"7\"</parameter></function>")
	f.Add("<function=A><parameter=x>")
	f.Fuzz(func(t *testing.T, text string) { fuzzParser(t, XMLFunction{}, text) })
}

func FuzzDecodeArguments(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `"{\"a\":1}"`, `""`, ``, `null`, `[1]`, `"{\"a\":"`, `{"a":{"b":[true,null,"x"]}}`, `{"a":1e400}`, `{"id":9007199254740993,"n":[-18446744073709551615,1e20,0.1]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		args, err := DecodeArguments("F (c1)", raw)
		if err != nil {
			var ae *ArgumentsError
			if !errors.As(err, &ae) || ae.Call != "F (c1)" {
				t.Fatalf("error does not name the call: %v", err)
			}
			return
		}
		again, err := DecodeArguments("F (c1)", canon.EncodeArguments(args))
		if err != nil {
			t.Fatalf("re-decode of %s: %v", canon.EncodeArguments(args), err)
		}
		if !proto.Equal(args, again) {
			t.Fatalf("re-decode differs: %v vs %v", args, again)
		}
	})
}

// FuzzTagFilter checks the filter never loses or invents text: whatever it
// shows plus the blocks it hid rebuilds the input, however it is chunked.
func FuzzTagFilter(f *testing.F) {
	f.Add("hello <tool_call>{}</tool_call> world", uint8(3))
	f.Add("a <func b ~~~tool_call\n{}\n~~~ c", uint8(1))
	f.Add("<function=A></function><tool", uint8(5))
	f.Fuzz(func(t *testing.T, text string, chunk uint8) {
		size := int(chunk%16) + 1
		filter := NewTagFilter()
		var shown strings.Builder
		for s := text; s != ""; {
			n := min(size, len(s))
			shown.WriteString(filter.Write(s[:n]))
			s = s[n:]
		}
		shown.WriteString(filter.Flush())
		if filter.Blocks() == 0 && !filter.InBlock() && shown.String() != text {
			t.Fatalf("text without blocks changed: %q -> %q", text, shown.String())
		}
		if len(shown.String()) > len(text) {
			t.Fatalf("filter invented text: %q -> %q", text, shown.String())
		}
	})
}

// formatSeeds adds each format's documented and recorded bodies (testdata/<format>/name)
// and a rendering of msg, tagged with the format's index.
func formatSeeds(f *testing.F, render func(Format) ([]byte, error), names ...string) {
	for i, fm := range Formats() {
		for _, name := range names {
			if b, err := os.ReadFile(filepath.Join("testdata", fm.Name(), name)); err == nil {
				f.Add(uint8(i), b)
			}
		}
		if b, err := render(fm); err == nil {
			f.Add(uint8(i), b)
		}
	}
}

// callsOf is a message's tool calls as comparable (name, arguments) pairs.
func callsOf(t *testing.T, m *toolfleetv1.Message) []string {
	var out []string
	for _, c := range ToolCalls(m) {
		out = append(out, c.GetName()+" "+string(canon.CallArguments(c)))
	}
	return out
}

// FuzzParseResponse: a provider's response body (untrusted: a proxy, a
// compromised endpoint, a bug) is parsed or refused with an error, never a
// panic; a parsed message renders in the same format and parses back to the
// same tool calls.
func FuzzParseResponse(f *testing.F) {
	sample := NewMessage(toolfleetv1.Role_ROLE_ASSISTANT, Text("Adding."), CallPart("c1", "Calculator_Add", map[string]any{"a": 2, "b": 3}))
	formatSeeds(f, func(fm Format) ([]byte, error) { return fm.RenderResponse(sample) },
		"response.json", "tool_search_response.json", "custom_tool_response.json", "parallel_signatures_response.json")
	formats := Formats()
	f.Fuzz(func(t *testing.T, which uint8, body []byte) {
		fm := formats[int(which)%len(formats)]
		msg, err := fm.ParseResponse(body)
		if err != nil {
			return
		}
		again, err := fm.RenderResponse(msg)
		if err != nil {
			t.Fatalf("%s: a parsed response does not render: %v", fm.Name(), err)
		}
		back, err := fm.ParseResponse(again)
		if err != nil {
			t.Fatalf("%s: the rendering %s does not parse: %v", fm.Name(), again, err)
		}
		if a, b := callsOf(t, msg), callsOf(t, back); !slices.Equal(a, b) {
			t.Fatalf("%s: tool calls %v became %v through %s", fm.Name(), a, b, again)
		}
	})
}

// FuzzParseRequest: a request body (what a proxy in front of a provider
// reads) is parsed or refused, never a panic, and a parsed request renders.
func FuzzParseRequest(f *testing.F) {
	req := &Request{Model: "m", Messages: []*toolfleetv1.Message{User("add 2 and 3")}}
	formatSeeds(f, func(fm Format) ([]byte, error) { return fm.RenderRequest(req) },
		"request.json", "tool_search_request.json", "tool_search_custom_request.json", "custom_tool_request.json", "parallel_signatures_request.json")
	formats := Formats()
	f.Fuzz(func(t *testing.T, which uint8, body []byte) {
		fm := formats[int(which)%len(formats)]
		r, err := fm.ParseRequest(body)
		if err != nil {
			return
		}
		if _, err := fm.RenderRequest(r); err != nil {
			t.Fatalf("%s: a parsed request does not render: %v", fm.Name(), err)
		}
	})
}

// FuzzStreamDecoder: any sequence of server-sent events is decoded or refused
// with an error, never a panic, however the provider splits it.
func FuzzStreamDecoder(f *testing.F) {
	for i, fm := range Formats() {
		for _, name := range []string{"stream_parallel.sse", "stream_hermes.sse", "programmatic_stream.sse", "tool_search_stream.sse", "custom_tool_stream.sse"} {
			if b, err := os.ReadFile(filepath.Join("testdata", fm.Name(), name)); err == nil {
				f.Add(uint8(i), b)
			}
		}
	}
	formats := Formats()
	f.Fuzz(func(t *testing.T, which uint8, stream []byte) {
		fm := formats[int(which)%len(formats)]
		dec := fm.NewStreamDecoder()
		event := ""
		for line := range strings.SplitSeq(string(stream), "\n") {
			switch {
			case strings.HasPrefix(line, "event:"):
				event = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
			case strings.HasPrefix(line, "data:"):
				if _, err := dec.Decode(event, []byte(strings.TrimSpace(strings.TrimPrefix(line, "data:")))); err != nil {
					return
				}
			}
		}
		_, _ = dec.Message()
	})
}
