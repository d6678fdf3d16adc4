package dialect

import (
	"strings"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// The 2026 families (issue 37). Each is a variant of a dialect above (its
// calls, plus a reasoning channel read as thinking), an alias (another
// engine name for the same wire shape), or new (Gemma 4). docs/formats.md
// has the sources.
const (
	// Qwen35 is Qwen3.5 / Qwen3.6 / Qwen3.5-Coder: qwen3_coder's calls, and
	// <think>…</think> read as thinking.
	Qwen35 Dialect = "qwen35"
	// GLM47 is GLM-4.7 / GLM-5: glm45's calls (written without newlines),
	// and <think>…</think> read as thinking.
	GLM47 Dialect = "glm47"
	// Gemma4: <|tool_call>call:NAME{key:<|"|>text<|"|>,n:42}<tool_call|>, and
	// the thought channel <|channel>thought\n…<channel|> read as thinking.
	Gemma4 Dialect = "gemma4"
	// Llama4Pythonic is vLLM's name for pythonic as Llama 4 writes it.
	Llama4Pythonic Dialect = "llama4_pythonic"
	// Llama4JSON is vLLM's name for llama3_json as Llama 4 writes it.
	Llama4JSON Dialect = "llama4_json"
	// DeepSeekV4: deepseek_v32's DSML invokes in a <｜DSML｜tool_calls>
	// section, and <think>…</think> read as thinking.
	DeepSeekV4 Dialect = "deepseek_v4"
	// DeepSeekV41 is DeepSeek V4.1: DeepSeekV4 with spaced tag names
	// (<｜DSML｜ calls>, <｜DSML｜ invoke …>, <｜DSML｜ parameter …>).
	DeepSeekV41 Dialect = "deepseek_v41"
	// KimiK3: the XTML channels, calls in
	// <|open|>tools<|sep|><|open|>call tool="NAME" index="1"<|sep|>
	// <|open|>argument key="k" type="string"<|sep|>v<|close|>argument<|sep|>…
	// and the think channel read as thinking (kimik3.go).
	KimiK3 Dialect = "kimi_k3"
	// MiniMaxM3: tags prefixed by the namespace marker ]<]minimax[>[, one
	// XML element per argument, nested for objects and arrays (minimaxm3.go).
	MiniMaxM3 Dialect = "minimax_m3"
)

func init() {
	dialectSpecs[Qwen35] = variant(Qwen3Coder, Qwen35, thinkBlock("<think>", "</think>", ""))
	dialectSpecs[GLM47] = variant(GLM45, GLM47, thinkBlock("<think>", "</think>", ""))
	dialectSpecs[GLM47].call = func(c *toolfleetv1.ToolCall) string {
		return strings.ReplaceAll(dialectSpecs[GLM45].call(c), "\n", "")
	}
	dialectSpecs[Gemma4] = gemma4Spec()
	dialectSpecs[Llama4Pythonic] = variant(Pythonic, Llama4Pythonic)
	dialectSpecs[Llama4JSON] = variant(Llama3JSON, Llama4JSON)
	// vLLM's DeepSeek V4 reasoning parser ends the reasoning where a tool
	// section begins, </think> or not.
	dialectSpecs[DeepSeekV4] = withMarkers(dsmlDialect("deepseek_v4", "<｜DSML｜", "tool_calls"), "deepseek_v4", thinkUntil("<think>", "</think>", "<｜DSML｜tool_calls>"))
	dialectSpecs[DeepSeekV41] = withMarkers(dsmlDialect("deepseek_v41", "<｜DSML｜ ", "calls"), "deepseek_v41", thinkUntil("<think>", "</think>", "<｜DSML｜ calls>"))
	dialectSpecs[KimiK3] = kimiK3Spec()
	dialectSpecs[MiniMaxM3] = miniMaxM3Spec()
}

// dsmlDialect is DeepSeek V4's shape: V3.2's invokes and parameters, tags
// prefixed by prefix, in a section named block. Results go back as
// <tool_result>…</tool_result> (the V4 encoder's tool_output_template).
func dsmlDialect(name, prefix, block string) *dialectSpec {
	open, close := prefix+block+">", "</"+prefix[1:]+block+">"
	return invokeDialect(name, open, close, prefix, " string=", false,
		"<"+prefix[1:]+"parameter name=\"PARAM_NAME\" string=\"true\">text value</"+prefix[1:]+"parameter>\n<"+prefix[1:]+"parameter name=\"OTHER\" string=\"false\">JSON value</"+prefix[1:]+"parameter>",
		func(r *toolfleetv1.ToolResult) string { return "<tool_result>" + resultJSON(r) + "</tool_result>" })
}

// variant is base's dialect under another name, with extra markers (a
// reasoning channel) read before base's own. With no extra markers it is
// an alias.
func variant(base, name Dialect, extra ...marker) *dialectSpec {
	return withMarkers(dialectSpecs[base], string(name), extra...)
}

// withMarkers is b under another name with extra markers read before b's.
func withMarkers(b *dialectSpec, name string, extra ...marker) *dialectSpec {
	s := *b
	g := newGrammar(name, append(extra, b.g.markers...)...)
	g.dropCutTail = b.g.dropCutTail
	s.g = g
	return &s
}

// thinkBlock is a reasoning channel: what stands between open and close is
// thinking, never text, and never a call (a call marker inside reasoning is
// reasoning, as the engines' reasoning parsers read it). strip is a channel
// name the block may start with ("thought\n"), dropped. Reasoning cut off by
// the end of the text is thinking too.
func thinkBlock(open, close, strip string) marker {
	return marker{open: open, layout: true, reasoning: true, read: func(s string, eof bool, _ *scanCtx) (unit, error) {
		end := strings.Index(s[len(open):], close)
		n := len(open) + end + len(close)
		if end < 0 {
			if !eof {
				return unit{until: close}, nil
			}
			end, n = len(s)-len(open), len(s)
		}
		inner := s[len(open) : len(open)+end]
		if strip != "" {
			inner = strings.TrimPrefix(inner, strip)
		}
		return unit{n: n, think: inner}, nil
	}}
}

// thinkUntil is thinkBlock (no channel name) that also ends, unread,
// where stop begins. Both ends begin with "<", so the scanner reads again
// at each "<"; the search resumes where the last one stopped.
func thinkUntil(open, close, stop string) marker {
	m := thinkBlock(open, close, "")
	m.read = func(s string, eof bool, sc *scanCtx) (unit, error) {
		from := max(len(open), sc.from-max(len(close), len(stop)))
		end, n := -1, 0
		if i := strings.Index(s[from:], close); i >= 0 {
			end, n = from+i, from+i+len(close)
		}
		if i := strings.Index(s[from:], stop); i >= 0 && (end < 0 || from+i < end) {
			end, n = from+i, from+i
		}
		if end < 0 {
			if !eof {
				sc.from = len(s)
				return unit{until: "<"}, nil
			}
			end, n = len(s), len(s)
		}
		return unit{n: n, think: s[len(open):end]}, nil
	}
	return m
}
