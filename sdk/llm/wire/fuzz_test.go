package wire

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/internal/canon"
)

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
	for _, c := range llm.ToolCalls(m) {
		out = append(out, c.GetName()+" "+string(canon.CallArguments(c)))
	}
	return out
}

// FuzzParseResponse: a provider's response body (untrusted: a proxy, a
// compromised endpoint, a bug) is parsed or refused with an error, never a
// panic; a parsed message renders in the same format and parses back to the
// same tool calls.
func FuzzParseResponse(f *testing.F) {
	sample := llm.NewMessage(toolfleetv1.Role_ROLE_ASSISTANT, llm.Text("Adding."), llm.CallPart("c1", "Calculator_Add", map[string]any{"a": 2, "b": 3}))
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
	req := &llm.Request{Model: "m", Messages: []*toolfleetv1.Message{llm.User("add 2 and 3")}}
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
