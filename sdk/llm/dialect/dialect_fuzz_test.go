package dialect

import (
	"errors"
	"strings"
	"testing"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/internal/convtest"
)

// fuzzDialect checks a dialect's contract on any text: no panic; every
// failure typed; a call only from text that holds one of the dialect's call
// markers; every call complete; the text streamed in chunks of any size
// gives the same calls and text as Parse (or fails as Parse does); and a
// call rendered back parses to the same tool.
func fuzzDialect(t *testing.T, d Dialect, text string, chunk uint8) {
	tools := []*toolfleetv1.ToolDefinition{convtest.TypedTool(t)}
	rest, calls, err := d.Parse(text, tools)
	if err != nil && !errors.Is(err, llm.ErrMalformed) && !errors.Is(err, llm.ErrInvalidArguments) {
		t.Fatalf("untyped error %v", err)
	}
	if len(calls) > 0 {
		found := false
		for _, m := range d.grammar().markers {
			found = found || !m.layout && strings.Contains(text, m.open)
		}
		if !found {
			t.Fatalf("calls %q from text without a call marker: %q", convtest.CallStrings(calls), text)
		}
	}
	for _, c := range calls {
		if c.GetName() == "" || c.GetId() == "" || c.GetArguments() == nil {
			t.Fatalf("incomplete call %v", c)
		}
	}
	size := int(chunk%16) + 1
	shown, scalls, _, serr := decodeChunks(d, text, size, tools)
	if (err == nil) != (serr == nil) {
		t.Fatalf("chunks of %d: err %v, Parse err %v", size, serr, err)
	}
	if err != nil {
		return
	}
	if got, want := convtest.CallStrings(scalls), convtest.CallStrings(calls); !equalStrings(got, want) {
		t.Fatalf("chunks of %d: calls %q, Parse %q", size, got, want)
	}
	if strings.TrimSpace(shown) != rest {
		t.Fatalf("chunks of %d: text %q, Parse %q", size, shown, rest)
	}
	fuzzThinkingOpen(t, d, text, size, tools)
	for _, c := range calls {
		_, again, err := d.Parse(d.RenderCall(c), tools)
		if err != nil {
			// A name or value the dialect cannot carry must fail loudly.
			if !errors.Is(err, llm.ErrMalformed) && !errors.Is(err, llm.ErrInvalidArguments) {
				t.Fatalf("re-parse: untyped error %v", err)
			}
			continue
		}
		if len(again) != 1 || again[0].GetName() != c.GetName() {
			t.Fatalf("re-parse of %q: %q", d.RenderCall(c), convtest.CallStrings(again))
		}
	}
}

// fuzzThinkingOpen: read from inside the reasoning channel (the prompt
// opened it), batch and streamed give the same answer, and a call still
// needs a call marker in the text.
func fuzzThinkingOpen(t *testing.T, d Dialect, text string, size int, tools []*toolfleetv1.ToolDefinition) {
	rest, think, calls, err := parseDialectFrom(d, text, tools, true)
	dec, _ := NewTextDecoder(d, tools)
	if !dec.StartInThinking() {
		return
	}
	var shown, thought strings.Builder
	var scalls []*toolfleetv1.ToolCall
	var serr error
	for i := 0; i < len(text) && serr == nil; i += size {
		var s string
		var c []*toolfleetv1.ToolCall
		s, c, serr = dec.Write(text[i:min(i+size, len(text))])
		shown.WriteString(s)
		thought.WriteString(dec.Thinking())
		scalls = append(scalls, c...)
	}
	if serr == nil {
		var s string
		var c []*toolfleetv1.ToolCall
		s, c, serr = dec.Close()
		shown.WriteString(s)
		thought.WriteString(dec.Thinking())
		scalls = append(scalls, c...)
	}
	if (err == nil) != (serr == nil) {
		t.Fatalf("thinking open, chunks of %d: err %v, batch err %v", size, serr, err)
	}
	if err != nil {
		return
	}
	if got, want := convtest.CallStrings(scalls), convtest.CallStrings(calls); !equalStrings(got, want) {
		t.Fatalf("thinking open, chunks of %d: calls %q, batch %q", size, got, want)
	}
	if strings.TrimSpace(shown.String()) != rest || strings.TrimSpace(thought.String()) != think {
		t.Fatalf("thinking open, chunks of %d: text %q thinking %q, batch %q %q", size, shown.String(), thought.String(), rest, think)
	}
	if len(calls) > 0 {
		found := false
		for _, m := range d.grammar().markers {
			found = found || !m.layout && strings.Contains(text, m.open)
		}
		if !found {
			t.Fatalf("thinking open: calls %q from text without a call marker: %q", convtest.CallStrings(calls), text)
		}
	}
}

// fuzzTarget seeds a dialect's fuzz target with its fixtures, each with a
// few chunk sizes, and its recovery rows, and runs fuzzDialect.
func fuzzTarget(f *testing.F, d Dialect) {
	for _, c := range dialectCases {
		if c.d == d {
			for _, chunk := range []uint8{0, 2, 6, 15} {
				f.Add(c.text, chunk)
			}
		}
	}
	for _, r := range recoveryRows {
		if r.p == llm.TextProtocol(d) {
			f.Add(r.text, uint8(len(r.text)))
		}
	}
	f.Fuzz(func(t *testing.T, text string, chunk uint8) { fuzzDialect(t, d, text, chunk) })
}

// One fuzz target per dialect parser.
func FuzzQwen3Coder(f *testing.F)  { fuzzTarget(f, Qwen3Coder) }
func FuzzHarmony(f *testing.F)     { fuzzTarget(f, Harmony) }
func FuzzMistral(f *testing.F)     { fuzzTarget(f, Mistral) }
func FuzzLlama3JSON(f *testing.F)  { fuzzTarget(f, Llama3JSON) }
func FuzzPythonic(f *testing.F)    { fuzzTarget(f, Pythonic) }
func FuzzKimiK2(f *testing.F)      { fuzzTarget(f, KimiK2) }
func FuzzGLM45(f *testing.F)       { fuzzTarget(f, GLM45) }
func FuzzMiniMaxM2(f *testing.F)   { fuzzTarget(f, MiniMaxM2) }
func FuzzDeepSeekV31(f *testing.F) { fuzzTarget(f, DeepSeekV31) }
func FuzzDeepSeekV32(f *testing.F) { fuzzTarget(f, DeepSeekV32) }
func FuzzQwen35(f *testing.F)      { fuzzTarget(f, Qwen35) }
func FuzzGLM47(f *testing.F)       { fuzzTarget(f, GLM47) }
func FuzzGemma4(f *testing.F)      { fuzzTarget(f, Gemma4) }
func FuzzDeepSeekV4(f *testing.F)  { fuzzTarget(f, DeepSeekV4) }
func FuzzDeepSeekV41(f *testing.F) { fuzzTarget(f, DeepSeekV41) }
func FuzzKimiK3(f *testing.F)      { fuzzTarget(f, KimiK3) }
func FuzzMiniMaxM3(f *testing.F)   { fuzzTarget(f, MiniMaxM3) }
