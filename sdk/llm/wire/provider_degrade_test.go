package wire

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/internal/convtest"
)

// featureRequest is a canonical request using every provider feature of
// this file: a grammar tool and its free-text call, a deferred tool with
// examples, a result loading a deferred tool, a signed call.
func featureRequest(t *testing.T) *llm.Request {
	t.Helper()
	schema, err := structpb.NewStruct(map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []any{"city"}})
	if err != nil {
		t.Fatal(err)
	}
	input := "1 + 2 * 3"
	signed := llm.CallPart("call_w", "get_weather", map[string]any{"city": "Oslo"})
	signed.GetToolCall().Signature = []byte("gemini-signature-bytes")
	return &llm.Request{
		Model: "m",
		Tools: []*toolfleetv1.ToolDefinition{
			{ModelName: "math_exp", Description: "Creates valid mathematical expressions", InputFormat: &toolfleetv1.ToolInputFormat{Type: "grammar", Syntax: "lark", Definition: "start: expr"}},
			{ModelName: "get_weather", Description: "Weather for a city.", InputSchema: schema, DeferLoading: true, Examples: []*toolfleetv1.ToolExample{{Description: "Oslo", InputJson: `{ "city": "Oslo" }`}, {InputJson: `not json`}}},
			{ModelName: "search_tools", Description: "Search the catalog.", InputSchema: schema},
		},
		Messages: []*toolfleetv1.Message{
			llm.User("Compute 1 + 2 * 3, then the weather."),
			llm.NewMessage(toolfleetv1.Role_ROLE_ASSISTANT, &toolfleetv1.Part{Kind: &toolfleetv1.Part_ToolCall{ToolCall: &toolfleetv1.ToolCall{Id: "call_m", Name: "math_exp", Input: &input}}}, llm.CallPart("call_s", "search_tools", map[string]any{"city": "weather"})),
			llm.NewMessage(toolfleetv1.Role_ROLE_TOOL, llm.ResultPart("call_m", "math_exp", "7", false), &toolfleetv1.Part{Kind: &toolfleetv1.Part_ToolResult{ToolResult: &toolfleetv1.ToolResult{CallId: "call_s", Name: "search_tools", ToolReferences: []string{"get_weather"}}}}),
			llm.NewMessage(toolfleetv1.Role_ROLE_ASSISTANT, signed),
			llm.NewMessage(toolfleetv1.Role_ROLE_TOOL, llm.ResultPart("call_w", "get_weather", "snow", false)),
		},
	}
}

// TestProviderFeaturesDegrade renders the feature request in every format
// and checks what each keeps, maps or drops (docs/formats.md, "Provider
// tool features"), and that every rendering parses back.
func TestProviderFeaturesDegrade(t *testing.T) {
	t.Parallel()
	type want struct {
		contains, lacks []string
	}
	wants := map[string]want{
		"openai": {
			contains: []string{`{"type":"custom","custom":{"name":"math_exp","description":"Creates valid mathematical expressions","format":{"type":"grammar","grammar":{"definition":"start: expr","syntax":"lark"}}}}`, `{"id":"call_m","type":"custom","custom":{"name":"math_exp","input":"1 + 2 * 3"}}`, `{\"tool_references\":[\"get_weather\"]}`},
			lacks:    []string{"defer_loading", "input_examples", "tool_reference\"", "custom_tool_call", "Z2VtaW5p"},
		},
		"openai-responses": {
			contains: []string{`"type":"custom","name":"math_exp"`, `"format":{"type":"grammar","syntax":"lark","definition":"start: expr"}`, `"type":"custom_tool_call","call_id":"call_m","name":"math_exp","input":"1 + 2 * 3"`, `"type":"custom_tool_call_output","call_id":"call_m"`, `"type":"function_call_output","call_id":"call_s","output":"{\"tool_references\":[\"get_weather\"]}"`, `"defer_loading":true`},
			lacks:    []string{"input_examples", "Z2VtaW5p"},
		},
		"anthropic": {
			contains: []string{`"defer_loading":true`, `"input_examples":[{"city":"Oslo"}]`, `"input":{"input":"1 + 2 * 3"}`, `"content":[{"type":"tool_reference","tool_name":"get_weather"}]`, `Text in the language of this lark grammar:\nstart: expr`},
			lacks:    []string{"not json", "custom_tool_call", "Z2VtaW5p"},
		},
		"gemini": {
			contains: []string{`"args":{"input":"1 + 2 * 3"}`, `"output":"{\"tool_references\":[\"get_weather\"]}"`, `"thoughtSignature":"Z2VtaW5pLXNpZ25hdHVyZS1ieXRlcw=="`},
			lacks:    []string{"defer_loading", "input_examples", "custom_tool_call"},
		},
		"bedrock": {
			contains: []string{`"input":{"input":"1 + 2 * 3"}`, `{\"tool_references\":[\"get_weather\"]}`},
			lacks:    []string{"defer_loading", "input_examples", "custom_tool_call", "Z2VtaW5p"},
		},
	}
	for _, f := range Formats() {
		t.Run(f.Name(), func(t *testing.T) {
			t.Parallel()
			req := featureRequest(t)
			body, err := f.RenderRequest(req)
			if err != nil {
				t.Fatal(err)
			}
			w := wants[f.Name()]
			for _, s := range w.contains {
				if !bytes.Contains(body, []byte(s)) {
					t.Errorf("rendering lacks %s:\n%s", s, body)
				}
			}
			for _, s := range w.lacks {
				if bytes.Contains(body, []byte(s)) {
					t.Errorf("rendering has %s:\n%s", s, body)
				}
			}
			back, err := f.ParseRequest(body)
			if err != nil {
				t.Fatal(err)
			}
			if len(back.Tools) != 3 {
				t.Fatalf("tools = %v", back.Tools)
			}
			call := llm.ToolCalls(back.Messages[1])[0]
			switch f.Name() {
			case "openai", "openai-responses":
				if call.GetInput() != "1 + 2 * 3" || back.Tools[0].GetInputFormat().GetDefinition() != "start: expr" || back.Tools[1].GetDeferLoading() != (f.Name() == "openai-responses") {
					t.Errorf("free text lost: call %v, tools %v", call, back.Tools)
				}
			default:
				if call.Input != nil || call.GetArguments().GetFields()["input"].GetStringValue() != "1 + 2 * 3" {
					t.Errorf("call = %v, want arguments {\"input\": text}", call)
				}
			}
			if f.Name() == "anthropic" {
				r := back.Messages[2].GetParts()[1].GetToolResult()
				if !reflect.DeepEqual(r.GetToolReferences(), []string{"get_weather"}) || !back.Tools[1].GetDeferLoading() || len(back.Tools[1].GetExamples()) != 1 {
					t.Errorf("anthropic lost a feature: result %v, tool %v", r, back.Tools[1])
				}
			}
		})
	}
}

// TestChatCustomTools: Chat Completions declares custom tools under
// "custom" (the grammar nested in format.grammar) and calls them with
// {"type": "custom", "custom": {name, input}}; both round-trip.
func TestChatCustomTools(t *testing.T) {
	t.Parallel()
	in := convtest.ReadTestdata(t, "openai/custom_tool_request.json")
	req, err := OpenAIChat{}.ParseRequest(in)
	if err != nil {
		t.Fatal(err)
	}
	if len(req.Tools) != 3 || req.Tools[0].GetInputFormat().GetType() != "text" || req.Tools[1].GetInputFormat().GetSyntax() != "regex" || req.Tools[2].GetInputFormat() != nil {
		t.Fatalf("tools = %v", req.Tools)
	}
	if req.ToolChoice != (llm.ToolChoice{Mode: llm.ToolChoiceTool, Name: "code_exec"}) {
		t.Errorf("choice = %+v", req.ToolChoice)
	}
	if c := llm.ToolCalls(req.Messages[1]); len(c) != 1 || c[0].GetInput() != `print("hello world")` {
		t.Fatalf("calls = %v", c)
	}
	out, err := OpenAIChat{}.RenderRequest(req)
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"tools", "tool_choice", "messages.1.tool_calls", "messages.2"} {
		assertSameJSON(t, path, jsonField(t, out, path), jsonField(t, in, path))
	}

	resp := convtest.ReadTestdata(t, "openai/custom_tool_response.json")
	msg, err := OpenAIChat{}.ParseResponse(resp)
	if err != nil {
		t.Fatal(err)
	}
	if c := llm.ToolCalls(msg); len(c) != 1 || c[0].GetInput() != `print("hello world")` || c[0].GetId() != "call_aGiFQkRWSWAIsMQ19fKqxUgb" {
		t.Fatalf("response calls = %v", c)
	}
	body, err := OpenAIChat{}.RenderResponse(msg)
	if err != nil {
		t.Fatal(err)
	}
	assertSameJSON(t, "tool_calls", jsonField(t, body, "choices.0.message.tool_calls"), jsonField(t, resp, "choices.0.message.tool_calls"))
	// The same turn continued on the Responses API stays a custom call.
	req.Messages = append(req.Messages[:2:2], llm.NewMessage(toolfleetv1.Role_ROLE_TOOL, llm.ResultPart("call_Bn1cjEDLFtiPwdT0tTQ3PwDq", "code_exec", "hello world", false)))
	rb, err := OpenAIResponses{}.RenderRequest(req)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{`"type":"custom_tool_call","call_id":"call_Bn1cjEDLFtiPwdT0tTQ3PwDq","name":"code_exec","input":"print(\"hello world\")"`, `"type":"custom_tool_call_output"`, `"tool_choice":{"name":"code_exec","type":"custom"}`} {
		if !bytes.Contains(rb, []byte(s)) {
			t.Errorf("responses rendering lacks %s:\n%s", s, rb)
		}
	}
}

// TestHasSnakeKey: Gemini bodies are rewritten to camelCase only when a key
// (not a value) holds an underscore.
func TestHasSnakeKey(t *testing.T) {
	t.Parallel()
	for body, want := range map[string]bool{
		`{"functionCall":{"name":"get_weather","args":{"city":"x"}}}`: false,
		`{"function_call":{"name":"get"}}`:                            true,
		`{"a" :"b", "thought_signature" : "c2ln"}`:                    true,
		`{"text":"a \"quoted_key\": inside"}`:                         false,
		`{"text":"ends with a backslash \\", "x_y":1}`:                true,
		`["a_b", "c_d"]`:  false,
		`{"unterminated_`: true,
		``:                false,
	} {
		if got := hasSnakeKey([]byte(body)); got != want {
			t.Errorf("hasSnakeKey(%s) = %v, want %v", body, got, want)
		}
	}
}

// FuzzHasSnakeKey: when hasSnakeKey says a valid JSON body has no key with
// an underscore, none of its keys has one (else a snake_case Gemini body
// would be read without its camelCase rewrite).
func FuzzHasSnakeKey(f *testing.F) {
	for _, name := range []string{"gemini/documented_request.json", "gemini/parallel_signatures_request.json", "gemini/documented_response.json"} {
		f.Add(convtest.ReadTestdata(f, name))
	}
	f.Add([]byte(`{"a\"_b":1}`))
	f.Add([]byte(`{"x":"\\","y_z":2}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		if !json.Valid(body) || hasSnakeKey(body) {
			return
		}
		var v any
		if err := json.Unmarshal(body, &v); err != nil {
			return
		}
		var walk func(any)
		walk = func(v any) {
			switch x := v.(type) {
			case map[string]any:
				for k, val := range x {
					if strings.Contains(k, "_") {
						t.Fatalf("%s: key %q has an underscore, hasSnakeKey said none", body, k)
					}
					walk(val)
				}
			case []any:
				for _, val := range x {
					walk(val)
				}
			}
		}
		walk(v)
	})
}
