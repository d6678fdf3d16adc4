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
