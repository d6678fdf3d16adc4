package dialect

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/internal/convtest"
)

// fuzzParser checks a text parser's contract on any input: it never
// panics, every failure is typed (ErrMalformed or ErrInvalidArguments),
// every call it returns is complete, and rendering the calls in the same
// protocol parses back to the same calls.
func fuzzParser(t *testing.T, p llm.TextProtocol, text string) {
	tools := []*toolfleetv1.ToolDefinition{convtest.TypedTool(t)}
	rest, calls, err := p.Parse(text, tools)
	if err != nil {
		if !errors.Is(err, llm.ErrMalformed) && !errors.Is(err, llm.ErrInvalidArguments) {
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
		if !errors.Is(err, llm.ErrMalformed) && !errors.Is(err, llm.ErrInvalidArguments) {
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
