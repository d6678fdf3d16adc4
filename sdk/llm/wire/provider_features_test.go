package wire

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/internal/canon"
	"github.com/toolfleet/toolfleet/sdk/llm/internal/convtest"
)

// withoutKeys returns a copy of a decoded JSON value with every object key
// in keys removed, at any depth (for fields a format writes differently
// but equal in meaning, such as a generated id).
func withoutKeys(v any, keys ...string) any {
	switch t := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, val := range t {
			if !slices.Contains(keys, k) {
				out[k] = withoutKeys(val, keys...)
			}
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, val := range t {
			out[i] = withoutKeys(val, keys...)
		}
		return out
	}
	return v
}

// TestAnthropicToolSearchRequest: a documented server-side tool search
// conversation (the regex search tool, deferred tools with input_examples,
// the server_tool_use / tool_search_tool_result blocks, a call of the tool
// the search loaded) goes through the canonical form unchanged.
func TestAnthropicToolSearchRequest(t *testing.T) {
	t.Parallel()
	in := convtest.ReadTestdata(t, "anthropic/tool_search_request.json")
	req, err := Anthropic{}.ParseRequest(in)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(req.NativeTools["anthropic"]); n != 1 || !bytes.Contains(req.NativeTools["anthropic"][0], []byte("tool_search_tool_regex_20251119")) {
		t.Fatalf("native tools = %s, want the regex tool search tool", req.NativeTools)
	}
	if len(req.Tools) != 2 || !req.Tools[0].GetDeferLoading() || !req.Tools[1].GetDeferLoading() {
		t.Fatalf("tools = %v, want two deferred definitions", req.Tools)
	}
	var examples []string
	for _, e := range req.Tools[0].GetExamples() {
		examples = append(examples, e.GetInputJson())
	}
	want := []string{`{"location":"San Francisco, CA","unit":"fahrenheit"}`, `{"location":"Tokyo, Japan","unit":"celsius"}`, `{"location":"New York, NY"}`}
	if !reflect.DeepEqual(examples, want) {
		t.Errorf("examples = %q, want %q", examples, want)
	}
	var kinds []string
	for _, p := range req.Messages[1].GetParts() {
		switch {
		case p.GetProviderBlock() != nil:
			kinds = append(kinds, p.GetProviderBlock().GetType())
		case p.GetToolCall() != nil:
			kinds = append(kinds, "call "+p.GetToolCall().GetName())
		default:
			kinds = append(kinds, "text")
		}
	}
	if want := []string{"text", "server_tool_use", "tool_search_tool_result", "text", "call get_weather"}; !reflect.DeepEqual(kinds, want) {
		t.Fatalf("assistant parts = %v, want %v", kinds, want)
	}
	out, err := Anthropic{}.RenderRequest(req)
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"tools", "messages.1", "messages.2"} {
		assertSameJSON(t, path, jsonField(t, out, path), jsonField(t, in, path))
	}
}

// TestAnthropicToolReferenceResult: a client-side tool search answers with
// tool_reference blocks; they are kept as ToolResult.tool_references and
// rendered back as the same blocks.
func TestAnthropicToolReferenceResult(t *testing.T) {
	t.Parallel()
	in := convtest.ReadTestdata(t, "anthropic/tool_search_custom_request.json")
	req, err := Anthropic{}.ParseRequest(in)
	if err != nil {
		t.Fatal(err)
	}
	r := req.Messages[2].GetParts()[0].GetToolResult()
	if r.GetCallId() != "toolu_01Search" || r.GetName() != "search_tools" || r.GetContent() != "" || !reflect.DeepEqual(r.GetToolReferences(), []string{"get_weather"}) {
		t.Fatalf("result = %v, want the tool_reference to get_weather", r)
	}
	if !req.Tools[1].GetDeferLoading() || req.Tools[0].GetDeferLoading() {
		t.Errorf("defer_loading = %v, %v; want false, true", req.Tools[0].GetDeferLoading(), req.Tools[1].GetDeferLoading())
	}
	out, err := Anthropic{}.RenderRequest(req)
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"tools", "messages.1", "messages.2"} {
		assertSameJSON(t, path, jsonField(t, out, path), jsonField(t, in, path))
	}
	// Text next to the references survives too.
	r.Content = "Found 1 tool."
	out, err = Anthropic{}.RenderRequest(req)
	if err != nil {
		t.Fatal(err)
	}
	assertSameJSON(t, "content with text", jsonField(t, out, "messages.2.content.0.content"),
		[]any{map[string]any{"type": "text", "text": "Found 1 tool."}, map[string]any{"type": "tool_reference", "tool_name": "get_weather"}})
	back, err := Anthropic{}.ParseRequest(out)
	if err != nil {
		t.Fatal(err)
	}
	if got := back.Messages[2].GetParts()[0].GetToolResult(); !proto.Equal(got, r) {
		t.Errorf("result = %v, want %v", got, r)
	}
}

// TestAnthropicToolSearchResponse: the documented response of a tool search
// turn round-trips, and its stream assembles to the same message (the
// tool_use's "direct" caller is the default, so it is not kept).
func TestAnthropicToolSearchResponse(t *testing.T) {
	t.Parallel()
	in := convtest.ReadTestdata(t, "anthropic/tool_search_response.json")
	msg, err := Anthropic{}.ParseResponse(in)
	if err != nil {
		t.Fatal(err)
	}
	calls := llm.ToolCalls(msg)
	if len(calls) != 1 || calls[0].GetCaller() != nil || msg.GetStopReason() != llm.StopToolCalls {
		t.Fatalf("calls %v stop %q", calls, msg.GetStopReason())
	}
	out, err := Anthropic{}.RenderResponse(msg)
	if err != nil {
		t.Fatal(err)
	}
	assertSameJSON(t, "content", jsonField(t, out, "content"), withoutKeys(jsonField(t, in, "content"), "caller"))

	got, err := DecodeStream(t.Context(), Anthropic{}, bytes.NewReader(convtest.ReadTestdata(t, "anthropic/tool_search_stream.sse")), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.GetParts()) != len(msg.GetParts()) {
		t.Fatalf("streamed %d parts, want %d", len(got.GetParts()), len(msg.GetParts()))
	}
	for i, p := range msg.GetParts() {
		if pb := p.GetProviderBlock(); pb != nil {
			var g, w any
			if err := json.Unmarshal(got.GetParts()[i].GetProviderBlock().GetJson(), &g); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(pb.GetJson(), &w); err != nil {
				t.Fatal(err)
			}
			assertSameJSON(t, pb.GetType(), g, w)
			got.Parts[i], msg.Parts[i] = nil, nil
		}
	}
	got.Usage, msg.Usage = nil, nil
	if !proto.Equal(got, msg) {
		t.Errorf("streamed message differs:\n got %v\nwant %v", got, msg)
	}
}

// TestResponsesCustomToolsRequest: custom tools with a text format and Lark
// and regex grammars, their custom_tool_call / custom_tool_call_output
// items, a deferred function and the tool_search tool all round-trip.
func TestResponsesCustomToolsRequest(t *testing.T) {
	t.Parallel()
	in := convtest.ReadTestdata(t, "openai-responses/custom_tool_request.json")
	req, err := OpenAIResponses{}.ParseRequest(in)
	if err != nil {
		t.Fatal(err)
	}
	if len(req.Tools) != 4 {
		t.Fatalf("tools = %v", req.Tools)
	}
	formats := []*toolfleetv1.ToolInputFormat{
		{Type: "text"},
		{Type: "grammar", Syntax: "lark"},
		{Type: "grammar", Syntax: "regex"},
		nil,
	}
	for i, want := range formats {
		got := req.Tools[i].GetInputFormat()
		if (got == nil) != (want == nil) || got.GetType() != want.GetType() || got.GetSyntax() != want.GetSyntax() || (want.GetType() == "grammar" && got.GetDefinition() == "") {
			t.Errorf("tool %d format = %v, want %v", i, got, want)
		}
	}
	if !strings.HasPrefix(req.Tools[1].GetInputFormat().GetDefinition(), "start: expr\n") || !req.Tools[3].GetDeferLoading() || req.Tools[3].GetInputSchema() == nil {
		t.Errorf("tools = %v", req.Tools)
	}
	if len(req.NativeTools[responsesName]) != 1 || req.ToolChoice != (llm.ToolChoice{Mode: llm.ToolChoiceTool, Name: "code_exec"}) {
		t.Fatalf("native %s, choice %+v", req.NativeTools, req.ToolChoice)
	}
	call := llm.ToolCalls(req.Messages[1])[0]
	if call.Input == nil || call.GetInput() != `print("hello world")` || call.GetArguments() != nil {
		t.Fatalf("call = %v, want free-text input", call)
	}
	if r := req.Messages[2].GetParts()[0].GetToolResult(); r.GetContent() != "hello world" || r.GetName() != "code_exec" {
		t.Fatalf("result = %v", r)
	}
	out, err := OpenAIResponses{}.RenderRequest(req)
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"tools", "tool_choice", "input.1", "input.2"} {
		assertSameJSON(t, path, jsonField(t, out, path), jsonField(t, in, path))
	}
}

// TestResponsesCustomToolResponse: a custom_tool_call response round-trips,
// and its stream assembles to the same message both from the final
// response.completed and from the input deltas alone.
func TestResponsesCustomToolResponse(t *testing.T) {
	t.Parallel()
	in := convtest.ReadTestdata(t, "openai-responses/custom_tool_response.json")
	msg, err := OpenAIResponses{}.ParseResponse(in)
	if err != nil {
		t.Fatal(err)
	}
	calls := llm.ToolCalls(msg)
	if len(calls) != 1 || calls[0].GetInput() != `print("hello world")` || calls[0].GetId() != "call_aGiFQkRWSWAIsMQ19fKqxUgb" || msg.GetStopReason() != llm.StopToolCalls {
		t.Fatalf("message = %v", msg)
	}
	out, err := OpenAIResponses{}.RenderResponse(msg)
	if err != nil {
		t.Fatal(err)
	}
	back, err := OpenAIResponses{}.ParseResponse(out)
	if err != nil {
		t.Fatal(err)
	}
	assertMessages(t, []*toolfleetv1.Message{msg}, []*toolfleetv1.Message{back})
	assertSameJSON(t, "custom_tool_call", withoutKeys(jsonField(t, out, "output.1"), "id"), withoutKeys(jsonField(t, in, "output.1"), "id"))

	stream := convtest.ReadTestdata(t, "openai-responses/custom_tool_stream.sse")
	// Without the final response's output the deltas alone must do.
	var final struct {
		Response map[string]any `json:"response"`
	}
	last := stream[bytes.LastIndex(stream, []byte("data: "))+len("data: "):]
	if err := json.Unmarshal(last, &final); err != nil {
		t.Fatal(err)
	}
	final.Response["output"] = []any{}
	noFinal := append(bytes.Clone(stream[:bytes.LastIndex(stream, []byte("data: "))]), []byte("data: "+string(canon.RawJSON(map[string]any{"type": "response.completed", "response": final.Response}))+"\n\n")...)
	for name, body := range map[string][]byte{"final": stream, "deltas": noFinal} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var deltas int
			got, err := DecodeStream(t.Context(), OpenAIResponses{}, bytes.NewReader(body), func(d llm.Delta) error {
				if d.ToolCall != nil && d.ToolCall.FreeText {
					deltas++
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if deltas != 3 {
				t.Errorf("%d free-text call deltas, want 3 (the item and two input deltas)", deltas)
			}
			gc := llm.ToolCalls(got)
			if len(gc) != 1 || !proto.Equal(gc[0], calls[0]) {
				t.Fatalf("streamed calls = %v, want %v", gc, calls)
			}
			if got.GetStopReason() != llm.StopToolCalls {
				t.Errorf("stop = %q", got.GetStopReason())
			}
		})
	}
}

// TestResponsesToolSearchItems: server-side tool search items come back as
// provider blocks in place, are sent back verbatim in the next request and
// in a rendered response, and stay out of other formats.
func TestResponsesToolSearchItems(t *testing.T) {
	t.Parallel()
	in := convtest.ReadTestdata(t, "openai-responses/tool_search_response.json")
	msg, err := OpenAIResponses{}.ParseResponse(in)
	if err != nil {
		t.Fatal(err)
	}
	parts := msg.GetParts()
	if len(parts) != 3 || parts[0].GetProviderBlock().GetType() != "tool_search_call" || parts[1].GetProviderBlock().GetType() != "tool_search_output" || parts[2].GetToolCall().GetName() != "get_weather" {
		t.Fatalf("parts = %v", parts)
	}
	out, err := OpenAIResponses{}.RenderResponse(msg)
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"output.0", "output.1"} {
		assertSameJSON(t, path, jsonField(t, out, path), jsonField(t, in, path))
	}
	turn := llm.NewMessage(toolfleetv1.Role_ROLE_ASSISTANT, msg.GetParts()...)
	req := &llm.Request{Messages: []*toolfleetv1.Message{llm.User("Weather in Paris?"), turn, llm.NewMessage(toolfleetv1.Role_ROLE_TOOL, llm.ResultPart("call_w1", "get_weather", "rain", false))}}
	body, err := OpenAIResponses{}.RenderRequest(req)
	if err != nil {
		t.Fatal(err)
	}
	for i, path := range []string{"input.1", "input.2"} {
		assertSameJSON(t, path, jsonField(t, body, path), jsonField(t, in, "output."+string(rune('0'+i))))
	}
	back, err := OpenAIResponses{}.ParseRequest(body)
	if err != nil {
		t.Fatal(err)
	}
	assertMessages(t, req.Messages, back.Messages)
	for _, f := range []Format{OpenAIChat{}, Anthropic{}, Gemini{}, Bedrock{}} {
		b, err := f.RenderRequest(req)
		if err != nil {
			t.Fatalf("%s: %v", f.Name(), err)
		}
		if bytes.Contains(b, []byte("tool_search")) {
			t.Errorf("%s: OpenAI's items leaked: %s", f.Name(), b)
		}
	}
}

// TestGeminiParallelSignatures: Gemini signs only the first of parallel
// calls and each sequential step's call; the signatures stay on their own
// calls through the canonical form and go back on the same parts, in a
// request, a response and a stream.
func TestGeminiParallelSignatures(t *testing.T) {
	t.Parallel()
	in := convtest.ReadTestdata(t, "gemini/parallel_signatures_request.json")
	req, err := Gemini{}.ParseRequest(in)
	if err != nil {
		t.Fatal(err)
	}
	sig := func(s string) []byte {
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	var got [][]byte
	for _, m := range req.Messages {
		for _, c := range llm.ToolCalls(m) {
			got = append(got, c.GetSignature())
		}
	}
	want := [][]byte{sig("CtwBAVSoXO4WbeZgQ3bM8P3ZNGHxrR2kq0mRA+uUqSdu8ZgYqWRV6lfH"), nil, sig("Cq8CAVSoXO6nP8V3wK2dL9kE1J3bTn4u0Zr5cY7oQx2fHgS1yWvRaTmN")}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("call signatures = %q, want %q", got, want)
	}
	out, err := Gemini{}.RenderRequest(req)
	if err != nil {
		t.Fatal(err)
	}
	// Gemini sent no call ids; the generated ones are sent back, the rest is the same.
	assertSameJSON(t, "contents", withoutKeys(jsonField(t, out, "contents"), "id"), jsonField(t, in, "contents"))

	resp := convtest.ReadTestdata(t, "gemini/parallel_signatures_response.json")
	msg, err := Gemini{}.ParseResponse(resp)
	if err != nil {
		t.Fatal(err)
	}
	if c := llm.ToolCalls(msg); len(c) != 2 || !bytes.Equal(c[0].GetSignature(), want[0]) || c[1].GetSignature() != nil {
		t.Fatalf("response calls = %v", c)
	}
	// Streamed, the parallel calls may arrive in separate chunks.
	var stream bytes.Buffer
	var r struct {
		Candidates []struct {
			Content struct {
				Parts []json.RawMessage `json:"parts"`
			} `json:"content"`
		} `json:"candidates"`
	}
	if err := json.Unmarshal(resp, &r); err != nil {
		t.Fatal(err)
	}
	for i, p := range r.Candidates[0].Content.Parts {
		chunk := map[string]any{"candidates": []any{map[string]any{"content": map[string]any{"role": "model", "parts": []json.RawMessage{p}}, "index": 0}}, "modelVersion": "gemini-3-pro-preview"}
		if i == len(r.Candidates[0].Content.Parts)-1 {
			chunk["candidates"].([]any)[0].(map[string]any)["finishReason"] = "STOP"
			chunk["usageMetadata"] = map[string]any{"promptTokenCount": 120, "candidatesTokenCount": 40, "thoughtsTokenCount": 88, "totalTokenCount": 248}
		}
		stream.WriteString("data: " + string(canon.RawJSON(chunk)) + "\n\n")
	}
	streamed, err := DecodeStream(t.Context(), Gemini{}, &stream, nil)
	if err != nil {
		t.Fatal(err)
	}
	assertMessages(t, []*toolfleetv1.Message{msg}, []*toolfleetv1.Message{streamed})
	// Other formats have nowhere to put a call signature: it is dropped.
	for _, f := range []Format{OpenAIChat{}, OpenAIResponses{}, Anthropic{}, Bedrock{}} {
		b, err := f.RenderRequest(req)
		if err != nil {
			t.Fatalf("%s: %v", f.Name(), err)
		}
		if bytes.Contains(b, []byte("CtwBAVSoXO4")) || bytes.Contains(b, want[0][:8]) {
			t.Errorf("%s: a Gemini signature leaked: %s", f.Name(), b)
		}
	}
}

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
