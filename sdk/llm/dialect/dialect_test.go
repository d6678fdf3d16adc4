package dialect

import (
	"errors"
	"strings"
	"testing"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/internal/canon"
	"github.com/toolfleet/toolfleet/sdk/llm/internal/convtest"
)

// dialectCase is one reply of a dialect's model, as the model writes it.
type dialectCase struct {
	name      string
	d         Dialect
	text      string
	wantText  string
	wantCalls []string
	wantErr   error
}

const wf = "Weather_Forecast"

// dialectCases are replies in each dialect's wire shape, from the models'
// chat templates and the serving engines' parser tests: complete,
// truncated, several calls, with prose, and the cases engines disagree on.
var dialectCases = []dialectCase{
	// Qwen3-Coder
	{"complete", Qwen3Coder, "I'll check.\n<tool_call>\n<function=Weather_Forecast>\n<parameter=city>\nSan Francisco\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
		"I'll check.", []string{`Weather_Forecast(call_1)={"city":"San Francisco","days":3}`}, nil},
	{"multi", Qwen3Coder, "<tool_call>\n<function=Weather_Forecast>\n<parameter=city>\nA\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=Weather_Forecast>\n<parameter=metric>\ntrue\n</parameter>\n<parameter=tags>\n[\"x\"]\n</parameter>\n</function>\n</tool_call>\nDone.",
		"Done.", []string{`Weather_Forecast(call_1)={"city":"A"}`, `Weather_Forecast(call_2)={"metric":true,"tags":["x"]}`}, nil},
	{"bare function", Qwen3Coder, "<function=Weather_Forecast>\n<parameter=city>\n42\n</parameter>\n</function>", "", []string{`Weather_Forecast(call_1)={"city":"42"}`}, nil},
	{"hermes json inside", Qwen3Coder, "<tool_call>\n{\"name\": \"Weather_Forecast\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>", "", []string{`Weather_Forecast(call_1)={"city":"Rome"}`}, nil},
	{"truncated", Qwen3Coder, "Sure.\n<tool_call>\n<function=Weather_Forecast>\n<parameter=city>\nOs", "", nil, ErrTruncated},
	{"bad integer", Qwen3Coder, "<tool_call>\n<function=Weather_Forecast>\n<parameter=days>\nthree\n</parameter>\n</function>\n</tool_call>", "", nil, llm.ErrInvalidArguments},
	{"no call", Qwen3Coder, "Plain <b>text</b> with a <tool and <function", "Plain <b>text</b> with a <tool and <function", nil, nil},

	// Harmony (gpt-oss)
	{"analysis then call", Harmony, `<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary to=functions.Weather_Forecast <|constrain|>json<|message|>{"city":"Tokyo","days":2}<|call|>`,
		"", []string{`Weather_Forecast(call_1)={"city":"Tokyo","days":2}`}, nil},
	{"recipient before channel", Harmony, `<|start|>assistant to=functions.Weather_Forecast<|channel|>commentary json<|message|>{"city":"Paris"}<|call|>`,
		"", []string{`Weather_Forecast(call_1)={"city":"Paris"}`}, nil},
	{"final answer", Harmony, `<|channel|>analysis<|message|>It is sunny per the tool.<|end|><|start|>assistant<|channel|>final<|message|>It is sunny in Oslo.<|return|>`,
		"It is sunny in Oslo.", nil, nil},
	{"preamble and two calls", Harmony, `<|channel|>commentary<|message|>Checking both.<|end|><|start|>assistant<|channel|>commentary to=functions.Weather_Forecast <|constrain|>json<|message|>{"city":"A"}<|call|><|start|>assistant<|channel|>commentary to=functions.Weather_Forecast <|constrain|>json<|message|>{"city":"B"}<|call|>`,
		"Checking both.", []string{`Weather_Forecast(call_1)={"city":"A"}`, `Weather_Forecast(call_2)={"city":"B"}`}, nil},
	{"truncated", Harmony, `<|channel|>commentary to=functions.Weather_Forecast <|constrain|>json<|message|>{"city":"Os`, "", nil, ErrTruncated},
	{"reasoning cut off", Harmony, `<|channel|>analysis<|message|>Let me th`, "", nil, nil},
	{"built-in recipient", Harmony, `<|channel|>analysis to=browser.search<|message|>{"q":"x"}<|call|>`, "", nil, llm.ErrMalformed},

	// Mistral
	{"v11", Mistral, `[TOOL_CALLS]Weather_Forecast[ARGS]{"city": "Lyon", "days": 1}`, "", []string{`Weather_Forecast(call_1)={"city":"Lyon","days":1}`}, nil},
	{"v11 multi with prose", Mistral, `Sure.[TOOL_CALLS]Weather_Forecast[ARGS]{"city":"a}b{"}[TOOL_CALLS]Weather_Forecast[ARGS]{"city":"B"}`,
		"Sure.", []string{`Weather_Forecast(call_1)={"city":"a}b{"}`, `Weather_Forecast(call_2)={"city":"B"}`}, nil},
	{"call id", Mistral, `[TOOL_CALLS]Weather_Forecast[CALL_ID]abc123def[ARGS]{"city":"X"}`, "", []string{`Weather_Forecast(abc123def)={"city":"X"}`}, nil},
	{"pre-v11 array", Mistral, `[TOOL_CALLS] [{"name": "Weather_Forecast", "arguments": {"city": "Nice"}, "id": "a1b2c3d4e"}, {"name": "Weather_Forecast", "arguments": {"city": "Metz"}}]`,
		"", []string{`Weather_Forecast(a1b2c3d4e)={"city":"Nice"}`, `Weather_Forecast(call_2)={"city":"Metz"}`}, nil},
	{"truncated", Mistral, `[TOOL_CALLS]Weather_Forecast[ARGS]{"city": "Ly`, "", nil, ErrTruncated},
	{"marker only", Mistral, `Let me call.[TOOL_CALLS]`, "", nil, ErrTruncated},

	// Llama 3.1 / 3.3 JSON
	{"python tag", Llama3JSON, `<|python_tag|>{"name": "Weather_Forecast", "parameters": {"city": "Austin"}}<|eom_id|>`, "", []string{`Weather_Forecast(call_1)={"city":"Austin"}`}, nil},
	{"python tag multi", Llama3JSON, `<|python_tag|>{"name": "Weather_Forecast", "parameters": {"city": "A"}}; {"name": "Weather_Forecast", "parameters": {"city": "B"}}`,
		"", []string{`Weather_Forecast(call_1)={"city":"A"}`, `Weather_Forecast(call_2)={"city":"B"}`}, nil},
	{"bare json", Llama3JSON, `{"name": "Weather_Forecast", "parameters": {"city": "Boston", "days": 2}}`, "", []string{`Weather_Forecast(call_1)={"city":"Boston","days":2}`}, nil},
	{"other json is text", Llama3JSON, "Here is data:\n{\"a\": {\"b\": 1}}\nDone.", "Here is data:\n{\"a\": {\"b\": 1}}\nDone.", nil, nil},
	{"mid-line json is text", Llama3JSON, `An example: {"name": "x", "parameters": {}} is a call.`, `An example: {"name": "x", "parameters": {}} is a call.`, nil, nil},
	{"truncated", Llama3JSON, `<|python_tag|>{"name": "Weather_Forecast", "parameters": {"city": "Aus`, "", nil, ErrTruncated},
	{"bare unfinished is text", Llama3JSON, `{"name": "Weather_Forecast", "parameters": {"ci`, `{"name": "Weather_Forecast", "parameters": {"ci`, nil, nil},

	// Pythonic (Llama 3.2 / 4)
	{"typed", Pythonic, `[Weather_Forecast(city='San Francisco', days=3, metric=True, tags=['a', "b"], comment=None)]`,
		"", []string{`Weather_Forecast(call_1)={"city":"San Francisco","comment":null,"days":3,"metric":true,"tags":["a","b"]}`}, nil},
	{"multi after prose", Pythonic, "Let me check.\n[Weather_Forecast(city='A'), Weather_Forecast(city=\"B\\\"s\", days='2', opts={'k': (1, 2)})]",
		"Let me check.", []string{`Weather_Forecast(call_1)={"city":"A"}`, `Weather_Forecast(call_2)={"city":"B\"s","days":2,"opts":{"k":[1,2]}}`}, nil},
	{"python start", Pythonic, `<|python_start|>[Weather_Forecast(city=42)]<|python_end|>`, "", []string{`Weather_Forecast(call_1)={"city":"42"}`}, nil},
	{"brackets in prose", Pythonic, "See [the docs](http://x) and\n[1, 2] or [x] (y).", "See [the docs](http://x) and\n[1, 2] or [x] (y).", nil, nil},
	{"truncated", Pythonic, `[Weather_Forecast(city='Ro`, "", nil, ErrTruncated},
	// Not a call in vLLM's and SGLang's pattern: text.
	{"positional", Pythonic, `[Weather_Forecast('Rome')]`, `[Weather_Forecast('Rome')]`, nil, nil},
	{"keyword then positional", Pythonic, `[Weather_Forecast(city='Rome', 3)]`, "", nil, llm.ErrInvalidArguments},

	// Kimi K2
	{"section", KimiK2, `<|tool_calls_section_begin|><|tool_call_begin|>functions.Weather_Forecast:0<|tool_call_argument_begin|>{"city": "Beijing"}<|tool_call_end|><|tool_calls_section_end|>`,
		"", []string{`Weather_Forecast(functions.Weather_Forecast:0)={"city":"Beijing"}`}, nil},
	{"multi with prose", KimiK2, `Let me look.<|tool_calls_section_begin|><|tool_call_begin|>functions.Weather_Forecast:0<|tool_call_argument_begin|>{"city":"A"}<|tool_call_end|><|tool_call_begin|>functions.Weather_Forecast:1<|tool_call_argument_begin|>{"city":"B"}<|tool_call_end|><|tool_calls_section_end|>`,
		"Let me look.", []string{`Weather_Forecast(functions.Weather_Forecast:0)={"city":"A"}`, `Weather_Forecast(functions.Weather_Forecast:1)={"city":"B"}`}, nil},
	// Outside a section the markers are text (kimi_k2_tool_parser.py, kimik2_detector.py).
	{"close without open", KimiK2, `<|tool_call_begin|>functions.Weather_Forecast:0<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>`,
		`<|tool_call_begin|>functions.Weather_Forecast:0<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>`, nil, nil},
	{"truncated", KimiK2, `<|tool_calls_section_begin|><|tool_call_begin|>functions.Weather_Forecast:0<|tool_call_argument_begin|>{"city":`, "", nil, ErrTruncated},

	// GLM-4.5 / 4.6 / 4.7
	{"4.5", GLM45, "Checking.\n<tool_call>Weather_Forecast\n<arg_key>city</arg_key>\n<arg_value>Beijing</arg_value>\n<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n</tool_call>",
		"Checking.", []string{`Weather_Forecast(call_1)={"city":"Beijing","days":2}`}, nil},
	{"4.7 no newlines, multi", GLM45, `<tool_call>Weather_Forecast<arg_key>city</arg_key><arg_value>42</arg_value><arg_key>tags</arg_key><arg_value>["x"]</arg_value></tool_call><tool_call>Weather_Forecast<arg_key>metric</arg_key><arg_value>False</arg_value></tool_call>`,
		"", []string{`Weather_Forecast(call_1)={"city":"42","tags":["x"]}`, `Weather_Forecast(call_2)={"metric":false}`}, nil},
	{"no arguments", GLM45, "<tool_call>Weather_Forecast\n</tool_call>", "", []string{`Weather_Forecast(call_1)={}`}, nil},
	{"truncated", GLM45, "<tool_call>Weather_Forecast\n<arg_key>city</arg_key>\n<arg_value>Bei", "", nil, ErrTruncated},
	{"bad value", GLM45, "<tool_call>Weather_Forecast<arg_key>days</arg_key><arg_value>soon</arg_value></tool_call>", "", nil, llm.ErrInvalidArguments},

	// MiniMax-M2
	{"section", MiniMaxM2, "<minimax:tool_call>\n<invoke name=\"Weather_Forecast\">\n<parameter name=\"city\">San Francisco</parameter>\n<parameter name=\"days\">3</parameter>\n</invoke>\n</minimax:tool_call>",
		"", []string{`Weather_Forecast(call_1)={"city":"San Francisco","days":3}`}, nil},
	{"two invokes after prose", MiniMaxM2, "On it.\n<minimax:tool_call>\n<invoke name=\"Weather_Forecast\">\n<parameter name=\"city\">A</parameter>\n</invoke>\n<invoke name=\"Weather_Forecast\">\n<parameter name=\"tags\">[\"a\",\"b\"]</parameter>\n</invoke>\n</minimax:tool_call>",
		"On it.", []string{`Weather_Forecast(call_1)={"city":"A"}`, `Weather_Forecast(call_2)={"tags":["a","b"]}`}, nil},
	// An invoke outside the section is text (minimax_m2_tool_parser.py).
	{"bare invoke before a wrapped section", MiniMaxM2, "<invoke name=\"Weather_Forecast\"><parameter name=\"city\">A</parameter></invoke>\n<minimax:tool_call>\n<invoke name=\"Weather_Forecast\"><parameter name=\"city\">B</parameter></invoke>\n</minimax:tool_call>",
		"<invoke name=\"Weather_Forecast\"><parameter name=\"city\">A</parameter></invoke>", []string{`Weather_Forecast(call_1)={"city":"B"}`}, nil},
	// A section never closed is text (minimax_m2_tool_parser.py).
	{"truncated", MiniMaxM2, "<minimax:tool_call>\n<invoke name=\"Weather_Forecast\">\n<parameter name=\"city\">San", "<minimax:tool_call>\n<invoke name=\"Weather_Forecast\">\n<parameter name=\"city\">San", nil, nil},

	// DeepSeek-V3.1
	{"one", DeepSeekV31, `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>Weather_Forecast<｜tool▁sep｜>{"city": "Hangzhou"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>`,
		"", []string{`Weather_Forecast(call_1)={"city":"Hangzhou"}`}, nil},
	{"multi with prose", DeepSeekV31, `Checking.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>Weather_Forecast<｜tool▁sep｜>{"city":"A"}<｜tool▁call▁end｜><｜tool▁call▁begin｜>Weather_Forecast<｜tool▁sep｜>{"city":"B"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>`,
		"Checking.", []string{`Weather_Forecast(call_1)={"city":"A"}`, `Weather_Forecast(call_2)={"city":"B"}`}, nil},
	{"v3 form", DeepSeekV31, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>Weather_Forecast\n```json\n{\"city\": \"X\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
		"", []string{`Weather_Forecast(call_1)={"city":"X"}`}, nil},
	// A cut call after a complete one is dropped (deepseekv31_tool_parser.py).
	{"second call truncated", DeepSeekV31, `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>Weather_Forecast<｜tool▁sep｜>{"city":"A"}<｜tool▁call▁end｜><｜tool▁call▁begin｜>Weather_Forecast<｜tool▁sep｜>{"ci`, "", []string{`Weather_Forecast(call_1)={"city":"A"}`}, nil},
	{"truncated", DeepSeekV31, `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>Weather_Forecast<｜tool▁sep｜>{"city": "Hang`, "", nil, ErrTruncated},

	// DeepSeek-V3.2 (DSML)
	{"dsml", DeepSeekV32, "<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"Weather_Forecast\">\n<｜DSML｜parameter name=\"city\" string=\"true\">42</｜DSML｜parameter>\n<｜DSML｜parameter name=\"days\" string=\"false\">2</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>",
		"", []string{`Weather_Forecast(call_1)={"city":"42","days":2}`}, nil},
	{"dsml multi with prose", DeepSeekV32, "Both.\n<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"Weather_Forecast\">\n<｜DSML｜parameter name=\"city\" string=\"true\">A</｜DSML｜parameter>\n</｜DSML｜invoke>\n<｜DSML｜invoke name=\"Weather_Forecast\">\n<｜DSML｜parameter name=\"opts\" string=\"false\">{\"k\": [1]}</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>",
		"Both.", []string{`Weather_Forecast(call_1)={"city":"A"}`, `Weather_Forecast(call_2)={"opts":{"k":[1]}}`}, nil},
	// Outside a section the markers are text.
	{"close without open", DeepSeekV32, "<｜DSML｜invoke name=\"Weather_Forecast\">\n<｜DSML｜parameter name=\"city\" string=\"true\">A</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>\nDone.",
		"<｜DSML｜invoke name=\"Weather_Forecast\">\n<｜DSML｜parameter name=\"city\" string=\"true\">A</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>\nDone.", nil, nil},
	{"truncated", DeepSeekV32, "<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"Weather_Forecast\">\n<｜DSML｜parameter name=\"city\" string=\"true\">NY", "", nil, ErrTruncated},
}

// decodeChunks streams text through a decoder in chunks of size bytes.
func decodeChunks(d Dialect, text string, size int, tools []*toolfleetv1.ToolDefinition) (shown string, calls []*toolfleetv1.ToolCall, firstAt int, err error) {
	dec, _ := NewTextDecoder(d, tools)
	var b strings.Builder
	firstAt = -1
	for i := 0; i < len(text); i += size {
		s, c, err := dec.Write(text[i:min(i+size, len(text))])
		if err != nil {
			return "", nil, -1, err
		}
		if len(c) > 0 && firstAt < 0 {
			firstAt = min(i+size, len(text))
		}
		b.WriteString(s)
		calls = append(calls, c...)
	}
	s, c, err := dec.Close()
	if err != nil {
		return "", nil, -1, err
	}
	b.WriteString(s)
	return b.String(), append(calls, c...), firstAt, nil
}

// TestDialects parses every fixture whole and streamed in awkward chunks
// (one byte at a time included): the same calls, the same text, no marker
// shown, and the first call returned before the text ends.
func TestDialects(t *testing.T) {
	t.Parallel()
	tools := []*toolfleetv1.ToolDefinition{convtest.TypedTool(t)}
	for _, tt := range dialectCases {
		t.Run(string(tt.d)+" "+tt.name, func(t *testing.T) {
			t.Parallel()
			text, calls, err := tt.d.Parse(tt.text, tools)
			checkParse(t, text, calls, err, tt.wantText, tt.wantCalls, tt.wantErr)
			if tt.wantErr != nil && !errors.Is(err, llm.ErrMalformed) {
				t.Fatalf("Parse err = %v does not match ErrMalformed", err)
			}
			for _, size := range []int{1, 2, 3, 5, 7, 16, len(tt.text)} {
				shown, scalls, firstAt, serr := decodeChunks(tt.d, tt.text, size, tools)
				if tt.wantErr != nil {
					if !errors.Is(serr, tt.wantErr) {
						t.Errorf("chunks of %d: err = %v, want %v", size, serr, tt.wantErr)
					}
					continue
				}
				if serr != nil {
					t.Fatalf("chunks of %d: %v", size, serr)
				}
				if strings.TrimSpace(shown) != tt.wantText {
					t.Errorf("chunks of %d: shown %q, want %q", size, shown, tt.wantText)
				}
				if got := convtest.CallStrings(scalls); !equalStrings(got, tt.wantCalls) {
					t.Errorf("chunks of %d: calls = %q, want %q", size, got, tt.wantCalls)
				}
				// A list's calls (pythonic, Mistral's array) come together when it closes.
				// So do a MiniMax section's (the section is one unit).
				together := tt.d == Pythonic || tt.d == MiniMaxM2 || strings.Contains(tt.name, "array")
				if len(tt.wantCalls) > 1 && !together && size < len(tt.text) && firstAt >= len(tt.text) {
					t.Errorf("chunks of %d: the first call came only with the last chunk", size)
				}
			}
		})
	}
}

// TestDialectRenderParse: every dialect parses back the calls it renders,
// and teaches the tools in its instructions.
func TestDialectRenderParse(t *testing.T) {
	t.Parallel()
	tools := []*toolfleetv1.ToolDefinition{convtest.TypedTool(t)}
	call := llm.CallPart("call_1", wf, map[string]any{"city": "O'Neil \"x\" <y>", "days": 2, "tags": []any{"x"}, "metric": false, "opts": map[string]any{"k": 1.5}}).GetToolCall()
	for _, d := range Dialects() {
		t.Run(d.Name(), func(t *testing.T) {
			t.Parallel()
			if inst := d.Instructions(tools); !strings.Contains(inst, wf) || !strings.Contains(inst, `"days"`) {
				t.Errorf("instructions lack the tool:\n%s", inst)
			}
			rendered := d.RenderCall(call)
			text, calls, err := d.Parse("Before.\n"+rendered+"\nAfter.", tools)
			if err != nil {
				t.Fatalf("%s: %v", rendered, err)
			}
			if len(calls) != 1 || calls[0].GetName() != wf || string(canon.EncodeArguments(calls[0].GetArguments())) != string(canon.EncodeArguments(call.GetArguments())) {
				t.Errorf("%s\nparsed back %q", rendered, convtest.CallStrings(calls))
			}
			if text != "Before.\n\nAfter." && text != "Before.\nAfter." {
				t.Errorf("text = %q", text)
			}
			if r := d.RenderResult(&toolfleetv1.ToolResult{CallId: "c1", Name: wf, Content: "sunny"}); !strings.Contains(r, "sunny") {
				t.Errorf("result %q", r)
			}
			if p, ok := TextProtocolByName(d.Name()); !ok || p != llm.TextProtocol(d) {
				t.Errorf("TextProtocolByName(%q) = %v, %v", d.Name(), p, ok)
			}
		})
	}
}

func TestDialectFor(t *testing.T) {
	t.Parallel()
	for model, want := range map[string]Dialect{
		"openai/gpt-oss-120b": Harmony, "gpt-oss:20b": Harmony, "moonshotai/Kimi-K2-Instruct-0905": KimiK2,
		"zai-org/GLM-4.5-Air": GLM45, "glm-4.6": GLM45, "GLM-4.7": GLM47, "zai-org/GLM-5": GLM47,
		"google/gemma-4-31b-it": Gemma4, "gemma4:e4b": Gemma4, "Qwen/Qwen3.5-397B-A17B": Qwen35, "qwen3.6-plus": Qwen35, "Qwen3.5-Coder-32B": Qwen35, "MiniMaxAI/MiniMax-M2": MiniMaxM2,
		"deepseek-ai/DeepSeek-V3.1-Terminus": DeepSeekV31, "DeepSeek-V3.2-Exp": DeepSeekV31, "deepseek-ai/DeepSeek-V3.2": DeepSeekV32,
		"Qwen/Qwen3-Coder-30B-A3B-Instruct": Qwen3Coder, "mistralai/Mistral-Small-3.2-24B-Instruct-2506": Mistral,
		"devstral-small-2507": Mistral, "meta-llama/Llama-3.2-3B-Instruct": Pythonic, "llama4:scout": Pythonic,
		"meta-llama/Llama-4-Maverick-17B-128E-Instruct": Pythonic, "llama3.1:8b": Llama3JSON, "meta-llama/Llama-3.3-70B-Instruct": Llama3JSON,
		"deepseek-ai/DeepSeek-V4-Flash": DeepSeekV4, "deepseek-v4": DeepSeekV4, "deepseek-ai/DeepSeek-V4.1-Flash": DeepSeekV41, "moonshotai/Kimi-K3": KimiK3, "kimi-k3-thinking": KimiK3,
		"MiniMaxAI/MiniMax-M3": MiniMaxM3, "minimax-m3": MiniMaxM3,
	} {
		if got, ok := For(model); !ok || got != want {
			t.Errorf("For(%q) = %q, %v; want %q", model, got, ok, want)
		}
	}
	for _, model := range []string{"gpt-4o", "claude-sonnet-4-5", "qwen2.5-7b-instruct", "llama2"} {
		if got, ok := For(model); ok {
			t.Errorf("For(%q) = %q", model, got)
		}
	}
}

// TestDialectBounds: a call that never closes fails once it passes the
// bound instead of growing the buffer, and a large call streamed in small
// chunks is complete and exact (each chunk only extends the scan).
func TestDialectBounds(t *testing.T) {
	t.Parallel()
	dec, _ := NewTextDecoder(Mistral, nil)
	chunk := strings.Repeat(`{"a":[`, 64<<10/6)
	var err error
	if _, _, err = dec.Write(`[TOOL_CALLS]Weather_Forecast[ARGS]`); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2*maxUnitBytes/len(chunk) && err == nil; i++ {
		_, _, err = dec.Write(chunk)
	}
	if !errors.Is(err, llm.ErrMalformed) || !strings.Contains(err.Error(), "unfinished") {
		t.Fatalf("err = %v, want a refusal of the unfinished call", err)
	}
	for _, d := range []Dialect{Qwen3Coder, Mistral, Llama3JSON, Pythonic} {
		big := strings.Repeat("line {of} [code] 'q' \"x\"\n", 40000) // ~1 MB
		call := llm.CallPart("c", wf, map[string]any{"city": big}).GetToolCall()
		_, calls, _, err := decodeChunks(d, d.RenderCall(call), 16, nil)
		if err != nil || len(calls) != 1 || calls[0].GetArguments().GetFields()["city"].GetStringValue() != big {
			t.Errorf("%s: %d calls, %v", d, len(calls), err)
		}
	}
}
