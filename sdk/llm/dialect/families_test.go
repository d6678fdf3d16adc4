package dialect

import (
	"strings"
	"testing"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/internal/convtest"
)

// The 2026 families' fixtures, model output taken from the engines' tests
// (each source named); they join dialectCases, so TestDialects parses each
// whole and streamed, and the fuzz targets are seeded with them.
var familyCases = []dialectCase{
	// Gemma 4. Source: ollama model/parsers/gemma4_test.go (cases named in quotes).
	{"tool_call_simple", Gemma4, `<|tool_call>call:get_weather{location:<|"|>Paris<|"|>}<tool_call|>`,
		"", []string{`get_weather(call_1)={"location":"Paris"}`}, nil},
	{"multiple_tool_calls", Gemma4, `<|tool_call>call:get_weather{location:<|"|>Paris<|"|>}<tool_call|><|tool_call>call:get_weather{location:<|"|>London<|"|>}<tool_call|>`,
		"", []string{`get_weather(call_1)={"location":"Paris"}`, `get_weather(call_2)={"location":"London"}`}, nil},
	{"thinking_then_tool_call", Gemma4, "<|channel>thought\nI need to check the weather<channel|><|tool_call>call:get_weather{location:<|\"|>Paris<|\"|>}<tool_call|>",
		"", []string{`get_weather(call_1)={"location":"Paris"}`}, nil},
	{"content_then_tool_call", Gemma4, `Let me check that for you.<|tool_call>call:get_weather{location:<|"|>Paris<|"|>}<tool_call|>`,
		"Let me check that for you.", []string{`get_weather(call_1)={"location":"Paris"}`}, nil},
	{"tool_call_with_number_arg", Gemma4, `<|tool_call>call:set_temp{value:42}<tool_call|>`, "", []string{`set_temp(call_1)={"value":42}`}, nil},
	{"tool_call_with_null_args", Gemma4, `<|tool_call>call:set_optional{value:null,nested:{value:null}}<tool_call|>`,
		"", []string{`set_optional(call_1)={"nested":{"value":null},"value":null}`}, nil},
	{"tool_call_with_nested_object", Gemma4, `<|tool_call>call:process{config:{enabled:true,name:<|"|>test<|"|>}}<tool_call|>`,
		"", []string{`process(call_1)={"config":{"enabled":true,"name":"test"}}`}, nil},
	{"tool_call_with_array", Gemma4, `<|tool_call>call:process{items:[<|"|>a<|"|>,<|"|>b<|"|>]}<tool_call|>`,
		"", []string{`process(call_1)={"items":["a","b"]}`}, nil},
	{"tool_call_with_mixed_raw_and_gemma_quoted_values", Gemma4, `<|tool_call>call:search{query:"raw \"quoted\"",note:<|"|>gemma "quoted"<|"|>}<tool_call|>`,
		"", []string{`search(call_1)={"note":"gemma \"quoted\"","query":"raw \"quoted\""}`}, nil},
	{"tool_call_done_flush_without_close_tag_with_unescaped_double_quotes", Gemma4, `<|tool_call>call:search{query:<|"|>say "hello" and "bye"<|"|>}`,
		"", []string{`search(call_1)={"query":"say \"hello\" and \"bye\""}`}, nil},
	{"thinking_then_content", Gemma4, "<|channel>thought\nLet me think about this...<channel|>The answer is 42.", "The answer is 42.", nil, nil},
	{"truncated", Gemma4, `<|tool_call>call:get_`, "", nil, ErrTruncated},

	// Qwen3.5. Source: ollama model/parsers/qwen35_test.go.
	{"xml call", Qwen35, "<tool_call><function=get_weather><parameter=location>\nSan Francisco\n</parameter><parameter=days>\n3\n</parameter></function></tool_call>",
		"", []string{`get_weather(call_1)={"days":3,"location":"San Francisco"}`}, nil},
	{"think then answer", Qwen35, "<think>\nLet me think...</think>Answer.", "Answer.", nil, nil},
	{"truncated", Qwen35, "<think>ok</think><tool_call>\n<function=Weather_Forecast>\n<parameter=city>\nOs", "", nil, ErrTruncated},

	// GLM-4.7 / GLM-5. Source: sglang python/sglang/srt/function_call/glm47_moe_detector.py
	// (the format in Glm47MoeDetector's doc) and ollama model/parsers/glm47_test.go.
	{"two calls", GLM47, "<tool_call>get_weather<arg_key>city</arg_key><arg_value>北京</arg_value><arg_key>date</arg_key><arg_value>2024-06-27</arg_value></tool_call><tool_call>get_weather<arg_key>city</arg_key><arg_value>上海</arg_value><arg_key>date</arg_key><arg_value>2024-06-27</arg_value></tool_call>",
		"", []string{`get_weather(call_1)={"city":"北京","date":"2024-06-27"}`, `get_weather(call_2)={"city":"上海","date":"2024-06-27"}`}, nil},
	{"think answer call", GLM47, "<think>plan</think>Answer<tool_call>calculate<arg_key>count</arg_key><arg_value>3</arg_value><arg_key>enabled</arg_key><arg_value>true</arg_value></tool_call>",
		"Answer", []string{`calculate(call_1)={"count":3,"enabled":true}`}, nil},

	// Llama 4 (aliases). Source: vllm tests/tool_parsers/test_llama4_pythonic_tool_parser.py
	// and the llama3_json tests vLLM runs for llama4_json.
	{"python tags", Llama4Pythonic, "<|python_start|>[get_weather(city='LA', metric=True)]<|python_end|>", "", []string{`get_weather(call_1)={"city":"LA","metric":true}`}, nil},
	{"tagged", Llama4JSON, `<|python_tag|>{"name": "f", "parameters": {"a": 1}}`, "", []string{`f(call_1)={"a":1}`}, nil},
}

// familyRows are the recovery rows of the 2026 families (docs/formats.md,
// "Recovery from broken output"). Variants and aliases recover as their
// base dialect; the rows pin that, and Gemma 4's own shapes.
var familyRows = []recoveryRow{
	{Gemma4, shapeNoEnd, `<|tool_call>call:get_weather{location:<|"|>Paris<|"|>}`, "", []string{`get_weather={"location":"Paris"}`}, nil,
		engSplit, nil}, // ollama recovers it; vLLM's regex needs the end marker
	// vLLM gemma4_tool_parser.py @c31f17f4b150c829a866e3218b8420967bf7722a for the rows marked vllm.
	{Gemma4, shapeOrphanEnd, `Done.<tool_call|>`, `Done.<tool_call|>`, nil, nil, engVLLM, nil},
	{Gemma4, shapeCut, `Sure.<|tool_call>call:get_weather{location:<|"|>Pa`, "", nil, ErrTruncated, engVLLM, nil},
	// vLLM reads an empty value as "": both calls would run.
	{Gemma4, shapeBadOne, `<|tool_call>call:f{a:1}<tool_call|><|tool_call>call:f{a:}<tool_call|>`, "", nil, llm.ErrMalformed, engVLLM, []string{`f={"a":1}`, `f={"a":""}`}},
	{Gemma4, shapeSeparator, `<|tool_call>call:f{a:<|"|>x}, b:{y<|"|>}<tool_call|>`, "", []string{`f={"a":"x}, b:{y"}`}, nil, engVLLM, []string{`f={"a":"x}, b:{y"}`}},
	{Gemma4, shapeNotACall, `<|tool_call>get_weather{}<tool_call|>`, "", nil, llm.ErrMalformed, engVLLM, nil},
	{Qwen35, shapeNoEnd, "<think>x</think><tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</function>", "", []string{`f={"a":1}`}, nil,
		engBoth, []string{`f={"a":1}`}},
	// vLLM's Qwen3.5-Coder and GLM-4.7 parsers subclass the Qwen3-Coder and GLM-4.5 ones (read
	// for those dialects' rows): the same answers.
	{Qwen35, shapeOrphanEnd, "Done.</tool_call>", "Done.</tool_call>", nil, nil, engVLLM, nil},
	{Qwen35, shapeCut, "<tool_call>\n<function=f>\n<parameter=a>\n1", "", nil, ErrTruncated, engVLLM, []string{`f={"a":"1"}`}},
	{GLM47, shapeNoEnd, "<tool_call>f<arg_key>a</arg_key><arg_value>1</arg_value>", "", nil, ErrTruncated, engVLLM, nil},
	{GLM47, shapeOrphanEnd, "Done.</tool_call>", "Done.</tool_call>", nil, nil, engVLLM, nil},
	{GLM47, shapeCut, "<think>a</think><tool_call>f<arg_key>a</arg_key><arg_value>1", "", nil, ErrTruncated, engVLLM, nil},
}

func init() {
	dialectCases = append(dialectCases, familyCases...)
	recoveryRows = append(recoveryRows, familyRows...)
}

// TestFamiliesThinking: the reasoning channels of the 2026 families are
// thinking, never text, in batch and streamed one byte at a time.
func TestFamiliesThinking(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		d              Dialect
		text, thinking string
		wantText       string
		wantCalls      int
	}{
		// ollama model/parsers/gemma4_test.go "thinking_then_tool_call", "multiple_thinking_blocks"
		{Gemma4, "<|channel>thought\nI need to check the weather<channel|><|tool_call>call:get_weather{location:<|\"|>Paris<|\"|>}<tool_call|>", "I need to check the weather", "", 1},
		{Gemma4, "<|channel>first thought<channel|><|channel>second thought<channel|>Final answer.", "first thoughtsecond thought", "Final answer.", 0},
		// ollama model/parsers/qwen35_test.go
		{Qwen35, "<think>\nLet me think...</think>Answer.", "Let me think...", "Answer.", 0},
		// a call marker inside reasoning is reasoning
		{GLM47, "<think>maybe <tool_call>x</tool_call></think>Plain.", "maybe <tool_call>x</tool_call>", "Plain.", 0},
		// reasoning cut off by the end of the text
		{Qwen35, "<think>still going", "still going", "", 0},
	} {
		rest, think, calls, err := parseDialectThinking(tt.d, tt.text, nil)
		if err != nil || think != tt.thinking || rest != tt.wantText || len(calls) != tt.wantCalls {
			t.Errorf("%s %q: text %q, thinking %q, %d calls, %v", tt.d, tt.text, rest, think, len(calls), err)
		}
		dec, _ := NewTextDecoder(tt.d, nil)
		var shown, thought strings.Builder
		var n int
		for i := range len(tt.text) {
			s, c, err := dec.Write(tt.text[i : i+1])
			if err != nil {
				t.Fatal(err)
			}
			shown.WriteString(s)
			thought.WriteString(dec.Thinking())
			n += len(c)
		}
		s, c, err := dec.Close()
		shown.WriteString(s)
		thought.WriteString(dec.Thinking())
		if err != nil || strings.TrimSpace(thought.String()) != tt.thinking || strings.TrimSpace(shown.String()) != tt.wantText || n+len(c) != tt.wantCalls {
			t.Errorf("%s %q streamed: text %q, thinking %q, %v", tt.d, tt.text, shown.String(), thought.String(), err)
		}
	}
}

// TestFamiliesAuto: a native model's reply in a 2026 family's dialect is
// parsed under tool_protocol auto, its reasoning kept as thinking.
func TestFamiliesAuto(t *testing.T) {
	t.Parallel()
	tools := []*toolfleetv1.ToolDefinition{convtest.TypedTool(t)}
	msg := &toolfleetv1.Message{Role: toolfleetv1.Role_ROLE_ASSISTANT, Parts: []*toolfleetv1.Part{{Kind: &toolfleetv1.Part_Text{Text: "<|channel>thought\nweather<channel|>" +
		Gemma4.RenderCall(llm.CallPart("c", wf, map[string]any{"city": "Oslo"}).GetToolCall())}}}}
	out, err := parseAuto(msg, "google/gemma-4-31b-it", tools)
	if err != nil {
		t.Fatal(err)
	}
	if got := convtest.CallStrings(llm.ToolCalls(out)); len(got) != 1 || !strings.Contains(got[0], `"city":"Oslo"`) {
		t.Errorf("calls %q", got)
	}
	if !strings.Contains(out.String(), "weather") {
		t.Errorf("thinking lost: %v", out)
	}
}
