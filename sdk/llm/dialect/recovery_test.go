package dialect

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/internal/convtest"
)

// The recovery policy (docs/formats.md, "Recovery from broken output"):
// per dialect, broken and cut-off shapes of model output and what the
// parser returns, each row checked in batch and streamed at every split.
// The engines' answers come from reading vLLM's tool parsers
// (vllm/tool_parsers/*_tool_parser.py) and SGLang's detectors
// (python/sglang/srt/function_call/*_detector.py), and from the
// disagreements measured in issue 37.

// The shapes of broken output every dialect is checked on.
const (
	shapeNoEnd     = "missing end marker"
	shapeOrphanEnd = "orphan end marker"
	shapeCut       = "body cut mid-argument"
	shapeUnknown   = "unknown tool"
	shapeBadOne    = "invalid arguments in one of several calls"
	shapeSeparator = "separator inside arguments"
	shapeNotACall  = "not a call in the engines' grammar"
)

// What the engines were found to return for a row.
const (
	engBoth      = "both"      // vLLM and SGLang agree (issue 37's measurements)
	engVLLM      = "vllm"      // vLLM's parser read; SGLang's not checked
	engSGLang    = "sglang"    // SGLang's parser read; vLLM's not checked
	engSplit     = "split"     // they disagree; engCalls is vLLM's answer
	engUnchecked = "unchecked" // not checked against an engine
)

type recoveryRow struct {
	p         llm.TextProtocol
	shape     string
	text      string
	wantText  string
	wantCalls []string // NAME={arguments}, ids left out
	wantErr   error
	engines   string
	engCalls  []string // what the engines return (vLLM's when they split); nil: no call
}

const (
	kimiBegin, kimiEnd = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
	dsBegin, dsEnd     = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
)

func kimiCallText(id, args string) string {
	return "<|tool_call_begin|>" + id + "<|tool_call_argument_begin|>" + args + "<|tool_call_end|>"
}

func dsCallText(name, args string) string {
	return "<｜tool▁call▁begin｜>" + name + "<｜tool▁sep｜>" + args + "<｜tool▁call▁end｜>"
}

func mmInvoke(name, k, v string) string {
	return "<invoke name=\"" + name + "\">\n<parameter name=\"" + k + "\">" + v + "</parameter>\n</invoke>\n"
}

var recoveryRows = []recoveryRow{
	// hermes (a prompt protocol, parsed whole; the tag filter streams its text)
	{Hermes{}, shapeNoEnd, `<tool_call>{"name": "Weather_Forecast", "arguments": {"city": "Rome"}}`, "", []string{`Weather_Forecast={"city":"Rome"}`}, nil,
		engBoth, []string{`Weather_Forecast={"city":"Rome"}`}},
	{Hermes{}, shapeOrphanEnd, `Done.</tool_call>`, `Done.</tool_call>`, nil, nil, engVLLM, nil},
	{Hermes{}, shapeCut, `Sure.<tool_call>{"name": "Weather_Forecast", "arguments": {"city": "Ro`, "", nil, ErrTruncated, engVLLM, nil},
	{Hermes{}, shapeUnknown, `<tool_call>{"name": "Stock_Price", "arguments": {"s": "X"}}</tool_call>`, "", []string{`Stock_Price={"s":"X"}`}, nil,
		engSplit, []string{`Stock_Price={"s":"X"}`}},
	{Hermes{}, shapeBadOne, `<tool_call>{"name": "Weather_Forecast", "arguments": {"city": "A"}}</tool_call><tool_call>{"name": "Weather_Forecast", "arguments": {"city": }}</tool_call>`,
		"", nil, llm.ErrMalformed, engSplit, nil},
	{Hermes{}, shapeSeparator, `<tool_call>{"name": "Weather_Forecast", "arguments": {"city": "a</tool_call>b"}}</tool_call>`, "", nil, llm.ErrMalformed, engVLLM, nil},

	// qwen3_coder
	{Qwen3Coder, shapeNoEnd, "<tool_call>\n<function=Weather_Forecast>\n<parameter=city>\nRome\n</parameter>\n</function>", "", []string{`Weather_Forecast={"city":"Rome"}`}, nil,
		engBoth, []string{`Weather_Forecast={"city":"Rome"}`}},
	{Qwen3Coder, shapeOrphanEnd, "Done.</tool_call>", "Done.</tool_call>", nil, nil, engVLLM, nil},
	// vLLM qwen3coder_tool_parser.py @0b13f933b50e82c737922f22455d2392d48b8584 reads a function and a
	// parameter up to the end of the text: the cut value would run.
	{Qwen3Coder, shapeCut, "Sure.\n<tool_call>\n<function=Weather_Forecast>\n<parameter=city>\nRo", "", nil, ErrTruncated, engVLLM, []string{`Weather_Forecast={"city":"Ro"}`}},
	{Qwen3Coder, shapeUnknown, "<tool_call>\n<function=Stock_Price>\n<parameter=s>\nX\n</parameter>\n</function>\n</tool_call>", "", []string{`Stock_Price={"s":"X"}`}, nil,
		engVLLM, []string{`Stock_Price={"s":"X"}`}},
	{Qwen3Coder, shapeBadOne, "<tool_call>\n<function=Weather_Forecast>\n<parameter=city>\nA\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=Weather_Forecast>\n<parameter=days>\nthree\n</parameter>\n</function>\n</tool_call>",
		"", nil, llm.ErrInvalidArguments, engVLLM, []string{`Weather_Forecast={"city":"A"}`, `Weather_Forecast={"days":"three"}`}},

	// harmony (vLLM openai_tool_parser.py @2050c2115da88a06d1366c4e4f2e964a5fdeff69: only
	// complete messages to functions.* are calls; a cut one is no call)
	{Harmony, shapeNoEnd, `<|channel|>commentary to=functions.Weather_Forecast <|constrain|>json<|message|>{"city":"Oslo"}`, "", nil, ErrTruncated, engVLLM, nil},
	{Harmony, shapeOrphanEnd, `Done.<|call|>`, "Done.", nil, nil, engUnchecked, nil},
	{Harmony, shapeCut, `<|channel|>commentary to=functions.Weather_Forecast <|constrain|>json<|message|>{"city":"Os`, "", nil, ErrTruncated, engVLLM, nil},
	{Harmony, shapeUnknown, `<|channel|>commentary to=functions.Stock_Price <|constrain|>json<|message|>{"s":"X"}<|call|>`, "", []string{`Stock_Price={"s":"X"}`}, nil,
		engVLLM, []string{`Stock_Price={"s":"X"}`}},

	// mistral (vLLM mistral_tool_parser.py @decc268eec08cf0999fd2adae4e77d1842217b53, v11+: each
	// [TOOL_CALLS] piece with a "{" is a call, its arguments passed on unchecked)
	{Mistral, shapeCut, `[TOOL_CALLS]Weather_Forecast[ARGS]{"city": "Ly`, "", nil, ErrTruncated, engVLLM, []string{`Weather_Forecast={"city": "Ly`}},
	{Mistral, shapeUnknown, `[TOOL_CALLS]Stock_Price[ARGS]{"s": "X"}`, "", []string{`Stock_Price={"s":"X"}`}, nil, engVLLM, []string{`Stock_Price={"s":"X"}`}},
	{Mistral, shapeBadOne, `[TOOL_CALLS]Weather_Forecast[ARGS]{"city": "A"}[TOOL_CALLS]Weather_Forecast[ARGS]{"city": ]}`, "", nil, llm.ErrMalformed, engVLLM,
		[]string{`Weather_Forecast={"city":"A"}`, `Weather_Forecast={"city": ]}`}},
	// vLLM splits at every [TOOL_CALLS]: the first call gets `{"city": "a}`.
	{Mistral, shapeSeparator, `[TOOL_CALLS]Weather_Forecast[ARGS]{"city": "a}[TOOL_CALLS]b"}`, "", []string{`Weather_Forecast={"city":"a}[TOOL_CALLS]b"}`}, nil, engVLLM,
		[]string{`Weather_Forecast={"city": "a}`}},

	// llama3_json (vLLM llama_tool_parser.py @13e48c2bd449aafc4b60d0783d30e072f3201805: JSON
	// objects decoded in turn; any that fails makes the whole reply text)
	{Llama3JSON, shapeCut, `<|python_tag|>{"name": "Weather_Forecast", "parameters": {"city": "Aus`, "", nil, ErrTruncated, engVLLM, nil},
	{Llama3JSON, shapeUnknown, `<|python_tag|>{"name": "Stock_Price", "parameters": {"s": "X"}}`, "", []string{`Stock_Price={"s":"X"}`}, nil, engVLLM, []string{`Stock_Price={"s":"X"}`}},
	{Llama3JSON, shapeBadOne, `<|python_tag|>{"name": "Weather_Forecast", "parameters": {"city": "A"}}; {"name": "Weather_Forecast", "parameters": {"city": }}`, "", nil, llm.ErrMalformed, engVLLM, nil},
	{Llama3JSON, shapeSeparator, `<|python_tag|>{"name": "Weather_Forecast", "parameters": {"city": "a; b"}}`, "", []string{`Weather_Forecast={"city":"a; b"}`}, nil, engVLLM, []string{`Weather_Forecast={"city":"a; b"}`}},

	// pythonic (vLLM pythonic_tool_parser.py and SGLang pythonic_detector.py share one pattern)
	{Pythonic, shapeNoEnd, `[Weather_Forecast(city='Rome')`, "", nil, ErrTruncated, engVLLM, nil},
	{Pythonic, shapeNotACall, `[get_time( )]`, `[get_time( )]`, nil, nil, engBoth, nil},
	{Pythonic, shapeNotACall, `[Weather_Forecast('Rome')]`, `[Weather_Forecast('Rome')]`, nil, nil, engVLLM, nil},
	{Pythonic, shapeCut, `[Weather_Forecast(city='Ro`, "", nil, ErrTruncated, engVLLM, nil},
	{Pythonic, shapeUnknown, `[get_time()]`, "", []string{`get_time={}`}, nil, engVLLM, []string{`get_time={}`}},
	{Pythonic, shapeBadOne, `[Weather_Forecast(city='A'), Weather_Forecast(days=)]`, "", nil, llm.ErrMalformed, engVLLM, nil},
	{Pythonic, shapeSeparator, `[Weather_Forecast(city='a), b(')]`, "", []string{`Weather_Forecast={"city":"a), b("}`}, nil,
		engVLLM, []string{`Weather_Forecast={"city":"a), b("}`}},

	// kimi_k2
	{KimiK2, shapeNoEnd, "Two." + kimiBegin + kimiCallText("functions.Weather_Forecast:0", `{"city":"A"}`) +
		`<|tool_call_begin|>functions.Weather_Forecast:1<|tool_call_argument_begin|>{"city":"B"}` + kimiEnd,
		"Two.", []string{`Weather_Forecast={"city":"A"}`}, nil, engBoth, []string{`Weather_Forecast={"city":"A"}`}},
	{KimiK2, shapeNoEnd, kimiBegin + kimiCallText("functions.Weather_Forecast:0", `{"city":"A"}`), "", []string{`Weather_Forecast={"city":"A"}`}, nil,
		engVLLM, []string{`Weather_Forecast={"city":"A"}`}},
	{KimiK2, shapeOrphanEnd, kimiCallText("functions.Weather_Forecast:0", `{"city":"A"}`) + kimiEnd, kimiCallText("functions.Weather_Forecast:0", `{"city":"A"}`) + kimiEnd, nil, nil, engVLLM, nil},
	{KimiK2, shapeCut, kimiBegin + `<|tool_call_begin|>functions.Weather_Forecast:0<|tool_call_argument_begin|>{"city":"Be`, "", nil, ErrTruncated, engVLLM, nil},
	{KimiK2, shapeUnknown, kimiBegin + kimiCallText("functions.Stock_Price:0", `{"s":"X"}`) + kimiEnd, "", []string{`Stock_Price={"s":"X"}`}, nil,
		engVLLM, []string{`Stock_Price={"s":"X"}`}},
	// vLLM passes Kimi's arguments on unchecked: the broken call would run.
	{KimiK2, shapeBadOne, kimiBegin + kimiCallText("functions.Weather_Forecast:0", `{"city":"A"}`) + kimiCallText("functions.Weather_Forecast:1", `{"city":}`) + kimiEnd,
		"", nil, llm.ErrInvalidArguments, engVLLM, []string{`Weather_Forecast={"city":"A"}`, `Weather_Forecast={"city":}`}},
	{KimiK2, shapeSeparator, kimiBegin + kimiCallText("functions.Weather_Forecast:0", `{"city":"a<|tool_call_end|>b"}`) + kimiEnd,
		"", nil, llm.ErrInvalidArguments, engVLLM, []string{`Weather_Forecast={"city":"a`}},

	// glm45
	{GLM45, shapeNoEnd, "<tool_call>Weather_Forecast\n<arg_key>city</arg_key>\n<arg_value>Rome</arg_value>\n", "", nil, ErrTruncated, engVLLM, nil},
	{GLM45, shapeOrphanEnd, "Done.</tool_call>", "Done.</tool_call>", nil, nil, engVLLM, nil},
	{GLM45, shapeCut, "<tool_call>Weather_Forecast\n<arg_key>city</arg_key>\n<arg_value>Ro", "", nil, ErrTruncated, engVLLM, nil},
	{GLM45, shapeUnknown, "<tool_call>Stock_Price\n<arg_key>s</arg_key>\n<arg_value>X</arg_value>\n</tool_call>", "", []string{`Stock_Price={"s":"X"}`}, nil,
		engVLLM, []string{`Stock_Price={"s":"X"}`}},
	{GLM45, shapeBadOne, "<tool_call>Weather_Forecast<arg_key>city</arg_key><arg_value>A</arg_value></tool_call><tool_call>Weather_Forecast<arg_key>days</arg_key><arg_value>soon</arg_value></tool_call>",
		"", nil, llm.ErrInvalidArguments, engVLLM, []string{`Weather_Forecast={"city":"A"}`, `Weather_Forecast={"days":"soon"}`}},
	{GLM45, shapeSeparator, "<tool_call>Weather_Forecast<arg_key>city</arg_key><arg_value>a</tool_call>b</arg_value></tool_call>", "", nil, llm.ErrInvalidArguments, engUnchecked, nil},

	// minimax_m2: the section is the unit; one never closed is text.
	{MiniMaxM2, shapeNoEnd, "On it.\n<minimax:tool_call>\n" + mmInvoke("Weather_Forecast", "city", "Rome"), "On it.\n<minimax:tool_call>\n" + strings.TrimSpace(mmInvoke("Weather_Forecast", "city", "Rome")), nil, nil,
		engBoth, nil},
	{MiniMaxM2, shapeOrphanEnd, mmInvoke("Weather_Forecast", "city", "A") + "</minimax:tool_call>", mmInvoke("Weather_Forecast", "city", "A") + "</minimax:tool_call>", nil, nil, engVLLM, nil},
	{MiniMaxM2, shapeCut, "<minimax:tool_call>\n<invoke name=\"Weather_Forecast\">\n<parameter name=\"city\">Ro", "<minimax:tool_call>\n<invoke name=\"Weather_Forecast\">\n<parameter name=\"city\">Ro", nil, nil, engVLLM, nil},
	{MiniMaxM2, shapeUnknown, "<minimax:tool_call>\n" + mmInvoke("Stock_Price", "s", "X") + "</minimax:tool_call>", "", []string{`Stock_Price={"s":"X"}`}, nil,
		engVLLM, []string{`Stock_Price={"s":"X"}`}},
	{MiniMaxM2, shapeBadOne, "<minimax:tool_call>\n" + mmInvoke("Weather_Forecast", "city", "A") + mmInvoke("Weather_Forecast", "days", "soon") + "</minimax:tool_call>",
		"", nil, llm.ErrInvalidArguments, engVLLM, []string{`Weather_Forecast={"city":"A"}`, `Weather_Forecast={"days":"soon"}`}},
	{MiniMaxM2, shapeSeparator, "<minimax:tool_call>\n" + mmInvoke("Weather_Forecast", "city", "a</invoke>b") + "</minimax:tool_call>", "", nil, llm.ErrInvalidArguments, engUnchecked, nil},

	// deepseek_v31
	{DeepSeekV31, shapeNoEnd, dsBegin + dsCallText("Weather_Forecast", `{"city":"A"}`) + `<｜tool▁call▁begin｜>Weather_Forecast<｜tool▁sep｜>{"city":"B"}` + dsEnd,
		"", []string{`Weather_Forecast={"city":"A"}`}, nil, engVLLM, []string{`Weather_Forecast={"city":"A"}`}},
	{DeepSeekV31, shapeOrphanEnd, dsCallText("Weather_Forecast", `{"city":"A"}`) + dsEnd, dsCallText("Weather_Forecast", `{"city":"A"}`) + dsEnd, nil, nil, engBoth, nil},
	{DeepSeekV31, shapeCut, dsBegin + `<｜tool▁call▁begin｜>Weather_Forecast<｜tool▁sep｜>{"city":"Ha`, "", nil, ErrTruncated, engVLLM, nil},
	{DeepSeekV31, shapeUnknown, dsBegin + dsCallText("Stock_Price", `{"s":"X"}`) + dsEnd, "", []string{`Stock_Price={"s":"X"}`}, nil,
		engVLLM, []string{`Stock_Price={"s":"X"}`}},
	{DeepSeekV31, shapeBadOne, dsBegin + dsCallText("Weather_Forecast", `{"city":"A"}`) + dsCallText("Weather_Forecast", `{"city":}`) + dsEnd,
		"", nil, llm.ErrInvalidArguments, engVLLM, []string{`Weather_Forecast={"city":"A"}`, `Weather_Forecast={"city":}`}},
	{DeepSeekV31, shapeSeparator, dsBegin + dsCallText("Weather_Forecast", `{"city":"a<｜tool▁call▁end｜>b"}`) + dsEnd,
		"", nil, llm.ErrInvalidArguments, engVLLM, []string{`Weather_Forecast={"city":"a`}},

	// deepseek_v32 (vLLM deepseekv32_tool_parser.py @0372d7fd06b3b9c2181992586154f67b9f449be9,
	// SGLang deepseekv32_detector.py @03f31e60d189bae13c10afbe1a1aee82410e450f): their batch
	// parsers need the section's end (no call without it); their streaming parsers return each
	// invoke as it completes, as toolfleet does.
	{DeepSeekV32, shapeNoEnd, "<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"Weather_Forecast\">\n<｜DSML｜parameter name=\"city\" string=\"true\">A</｜DSML｜parameter>\n</｜DSML｜invoke>\n",
		"", []string{`Weather_Forecast={"city":"A"}`}, nil, engBoth, nil},
	{DeepSeekV32, shapeOrphanEnd, "<｜DSML｜invoke name=\"Weather_Forecast\">\n</｜DSML｜invoke>\n</｜DSML｜function_calls>", "<｜DSML｜invoke name=\"Weather_Forecast\">\n</｜DSML｜invoke>\n</｜DSML｜function_calls>", nil, nil, engBoth, nil},
	{DeepSeekV32, shapeCut, "<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"Weather_Forecast\">\n<｜DSML｜parameter name=\"city\" string=\"true\">NY", "", nil, ErrTruncated, engBoth, nil},
	{DeepSeekV32, shapeUnknown, "<｜DSML｜function_calls><｜DSML｜invoke name=\"Stock_Price\"><｜DSML｜parameter name=\"s\" string=\"true\">X</｜DSML｜parameter></｜DSML｜invoke></｜DSML｜function_calls>",
		"", []string{`Stock_Price={"s":"X"}`}, nil, engSplit, []string{`Stock_Price={"s":"X"}`}}, // SGLang drops it
	// Both engines pass "soon" on as a string for an integer.
	{DeepSeekV32, shapeBadOne, "<｜DSML｜function_calls><｜DSML｜invoke name=\"Weather_Forecast\"><｜DSML｜parameter name=\"city\" string=\"true\">A</｜DSML｜parameter></｜DSML｜invoke>" +
		"<｜DSML｜invoke name=\"Weather_Forecast\"><｜DSML｜parameter name=\"days\" string=\"false\">soon</｜DSML｜parameter></｜DSML｜invoke></｜DSML｜function_calls>",
		"", nil, llm.ErrInvalidArguments, engBoth, []string{`Weather_Forecast={"city":"A"}`, `Weather_Forecast={"days":"soon"}`}},
	// The engines' invoke ends at the first </｜DSML｜invoke>: a call with no arguments.
	{DeepSeekV32, shapeSeparator, "<｜DSML｜function_calls><｜DSML｜invoke name=\"Weather_Forecast\"><｜DSML｜parameter name=\"city\" string=\"true\">a</｜DSML｜invoke>b</｜DSML｜parameter></｜DSML｜invoke></｜DSML｜function_calls>",
		"", nil, llm.ErrInvalidArguments, engBoth, []string{`Weather_Forecast={}`}},
}

// withoutIDs is callStrings less the ids.
func withoutIDs(calls []*toolfleetv1.ToolCall) []string {
	var out []string
	for _, c := range convtest.CallStrings(calls) {
		name, rest, _ := strings.Cut(c, "(")
		_, args, _ := strings.Cut(rest, ")=")
		out = append(out, name+"="+args)
	}
	return out
}

// chunkings are the ways a row is streamed: every split in two, chunks of
// 1, 2 and 3 bytes, and random chunkings from a fixed seed.
func chunkings(text string) [][]string {
	var out [][]string
	for i := 0; i <= len(text); i++ {
		out = append(out, []string{text[:i], text[i:]})
	}
	for size := 1; size <= 3; size++ {
		var c []string
		for i := 0; i < len(text); i += size {
			c = append(c, text[i:min(i+size, len(text))])
		}
		out = append(out, c)
	}
	r := rand.New(rand.NewPCG(37, uint64(len(text))))
	for range 16 {
		var c []string
		for rest := text; rest != ""; {
			n := min(1+r.IntN(12), len(rest))
			c = append(c, rest[:n])
			rest = rest[n:]
		}
		out = append(out, c)
	}
	return out
}

// streamRow feeds chunks to p's streaming path: a dialect's TextDecoder,
// or (hermes) the tag filter for the text and Parse at the end for the
// calls, as WithTextProtocol does.
func streamRow(p llm.TextProtocol, chunks []string, tools []*toolfleetv1.ToolDefinition) (string, []*toolfleetv1.ToolCall, error) {
	d, ok := p.(Dialect)
	if !ok {
		f := NewTagFilter(p)
		var shown strings.Builder
		for _, c := range chunks {
			shown.WriteString(f.Write(c))
		}
		shown.WriteString(f.Flush())
		_, calls, err := p.Parse(strings.Join(chunks, ""), tools)
		return strings.TrimSpace(shown.String()), calls, err
	}
	dec, _ := NewTextDecoder(d, tools)
	var shown strings.Builder
	var calls []*toolfleetv1.ToolCall
	for _, c := range chunks {
		s, cs, err := dec.Write(c)
		if err != nil {
			return "", nil, err
		}
		shown.WriteString(s)
		calls = append(calls, cs...)
	}
	s, cs, err := dec.Close()
	if err != nil {
		return "", nil, err
	}
	shown.WriteString(s)
	return strings.TrimSpace(shown.String()), append(calls, cs...), nil
}

// TestRecoveryPolicy checks every row of the policy: Parse's calls, kept
// text and error, and the same answer streamed in every chunking.
func TestRecoveryPolicy(t *testing.T) {
	t.Parallel()
	tools := []*toolfleetv1.ToolDefinition{convtest.TypedTool(t)}
	for i, row := range recoveryRows {
		t.Run(fmt.Sprintf("%s/%d %s", row.p.Name(), i, row.shape), func(t *testing.T) {
			t.Parallel()
			text, calls, err := row.p.Parse(row.text, tools)
			checkRecovery(t, "Parse", row, text, calls, err)
			for _, chunks := range chunkings(row.text) {
				stext, scalls, serr := streamRow(row.p, chunks, tools)
				checkRecovery(t, fmt.Sprintf("streamed %q", chunks), row, stext, scalls, serr)
				if err == nil && serr == nil && !equalStrings(convtest.CallStrings(scalls), convtest.CallStrings(calls)) {
					t.Fatalf("streamed %q: calls %q, Parse %q", chunks, convtest.CallStrings(scalls), convtest.CallStrings(calls))
				}
			}
		})
	}
}

func checkRecovery(t *testing.T, how string, row recoveryRow, text string, calls []*toolfleetv1.ToolCall, err error) {
	t.Helper()
	if row.wantErr != nil {
		if !errors.Is(err, row.wantErr) || len(calls) > 0 {
			t.Fatalf("%s: err %v, calls %q; want %v and no call", how, err, convtest.CallStrings(calls), row.wantErr)
		}
		return
	}
	if err != nil {
		t.Fatalf("%s: %v", how, err)
	}
	if got := withoutIDs(calls); text != row.wantText || !equalStrings(got, row.wantCalls) {
		t.Fatalf("%s: text %q, calls %q; want %q, %q", how, text, got, row.wantText, row.wantCalls)
	}
}

// agreementTable is the figure docs/formats.md shows: per dialect, its
// rows, those that give the engines' calls, those that differ on purpose,
// and those not checked against an engine.
func agreementTable() string {
	var b strings.Builder
	b.WriteString("| dialect | rows | same calls as the engines | differ on purpose | unchecked |\n|---|---|---|---|---|\n")
	var names []string
	per := map[string][4]int{}
	for _, row := range recoveryRows {
		n := row.p.Name()
		if _, seen := per[n]; !seen {
			names = append(names, n)
		}
		c := per[n]
		c[0]++
		switch {
		case row.engines == engUnchecked:
			c[3]++
		case equalStrings(row.wantCalls, row.engCalls):
			c[1]++
		default:
			c[2]++
		}
		per[n] = c
	}
	var total [4]int
	for _, n := range names {
		c := per[n]
		fmt.Fprintf(&b, "| `%s` | %d | %d | %d | %d |\n", n, c[0], c[1], c[2], c[3])
		for i := range total {
			total[i] += c[i]
		}
	}
	fmt.Fprintf(&b, "| all | %d | %d | %d | %d |\n", total[0], total[1], total[2], total[3])
	return b.String()
}

// TestRecoveryAgreementDocumented: docs/formats.md carries the agreement
// figure these rows give, so the two cannot drift apart.
func TestRecoveryAgreementDocumented(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../../docs/formats.md")
	if err != nil {
		t.Fatal(err)
	}
	if want := agreementTable(); !strings.Contains(string(doc), want) {
		t.Errorf("docs/formats.md does not carry the agreement figure; it should read:\n%s", want)
	}
}
