package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/internal/canon"
	"github.com/toolfleet/toolfleet/sdk/llm/internal/convtest"
)

func indentJSON(t *testing.T, b []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		t.Fatal(err)
	}
	out.WriteByte('\n')
	return out.Bytes()
}

// TestRequestRoundTrip renders the fixture conversation in every format,
// checks it against the committed request fixture, parses it back and
// compares with the canonical input minus what the format cannot carry.
func TestRequestRoundTrip(t *testing.T) {
	t.Parallel()
	parallel := false
	for _, f := range Formats() {
		t.Run(f.Name(), func(t *testing.T) {
			t.Parallel()
			req := &llm.Request{
				Model:             "model-x",
				Messages:          convtest.Conversation(),
				Tools:             convtest.CalculatorTools(t),
				ToolChoice:        llm.ToolChoice{Mode: llm.ToolChoiceTool, Name: "Calculator_Add"},
				ParallelToolCalls: &parallel,
				MaxTokens:         512,
			}
			body, err := f.RenderRequest(req)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, f.Name()+"/request.json", indentJSON(t, body))
			got, err := f.ParseRequest(body)
			if err != nil {
				t.Fatal(err)
			}
			l := formatLosses[f.Name()]
			assertMessages(t, withoutLosses(l, req.Messages), got.Messages)
			if got.ToolChoice != req.ToolChoice {
				t.Errorf("tool choice = %+v, want %+v", got.ToolChoice, req.ToolChoice)
			}
			if !l.model && got.Model != req.Model {
				t.Errorf("model = %q, want %q", got.Model, req.Model)
			}
			if !l.parallel && (got.ParallelToolCalls == nil || *got.ParallelToolCalls) {
				t.Errorf("parallel = %v, want false", got.ParallelToolCalls)
			}
			if got.MaxTokens != 512 {
				t.Errorf("max tokens = %d", got.MaxTokens)
			}
			if len(got.Tools) != 2 {
				t.Fatalf("tools = %d", len(got.Tools))
			}
			for i, d := range got.Tools {
				want := req.Tools[i]
				if d.ModelName != want.ModelName || d.Description != want.Description || !proto.Equal(d.InputSchema, want.InputSchema) {
					t.Errorf("tool %d = %v, want %v", i, d, want)
				}
			}
		})
	}
}

// TestToolChoiceModes checks every tool_choice mode survives each format
// that can express it.
func TestToolChoiceModes(t *testing.T) {
	t.Parallel()
	choices := []llm.ToolChoice{{Mode: llm.ToolChoiceAuto}, {Mode: llm.ToolChoiceNone}, {Mode: llm.ToolChoiceRequired}, {Mode: llm.ToolChoiceTool, Name: "Calculator_Mul"}}
	for _, f := range Formats() {
		for _, c := range choices {
			t.Run(f.Name(), func(t *testing.T) {
				t.Parallel()
				body, err := f.RenderRequest(&llm.Request{Messages: []*toolfleetv1.Message{llm.User("hi")}, Tools: convtest.CalculatorTools(t), ToolChoice: c})
				if err != nil {
					t.Fatal(err)
				}
				got, err := f.ParseRequest(body)
				if err != nil {
					t.Fatal(err)
				}
				want := c
				if f.Name() == "bedrock" && c.Mode == llm.ToolChoiceNone {
					want = llm.ToolChoice{} // Converse cannot forbid calls
				}
				if got.ToolChoice != want {
					t.Errorf("%s: got %+v, want %+v", body, got.ToolChoice, want)
				}
			})
		}
	}
}

func fixtureResponse() *toolfleetv1.Message {
	m := llm.NewMessage(toolfleetv1.Role_ROLE_ASSISTANT,
		convtest.ThinkingPart("Two independent sums.", "sig-1"),
		llm.Text("Let me compute."),
		llm.CallPart("call_1", "Calculator_Add", map[string]any{"a": 2, "b": 3}),
		llm.CallPart("call_2", "Calculator_Mul", map[string]any{"a": 4, "b": 5}),
	)
	m.StopReason = llm.StopToolCalls
	m.Model = "model-x"
	m.Usage = &toolfleetv1.Usage{InputTokens: 100, OutputTokens: 20, CacheReadTokens: 10}
	return m
}

// TestResponseRoundTrip renders an assistant turn as each provider's
// response body (checked against the fixture) and parses it back.
func TestResponseRoundTrip(t *testing.T) {
	t.Parallel()
	for _, f := range Formats() {
		t.Run(f.Name(), func(t *testing.T) {
			t.Parallel()
			msg := fixtureResponse()
			body, err := f.RenderResponse(msg)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, f.Name()+"/response.json", indentJSON(t, body))
			got, err := f.ParseResponse(body)
			if err != nil {
				t.Fatal(err)
			}
			l := formatLosses[f.Name()]
			want := withoutLosses(l, []*toolfleetv1.Message{msg})[0]
			if f.Name() == "bedrock" {
				want.Model = "" // not in Converse bodies
			}
			assertMessages(t, []*toolfleetv1.Message{want}, []*toolfleetv1.Message{got})
		})
	}
}

// TestParseDocumentedResponses parses response bodies copied in shape from
// each provider's documentation (testdata/<format>/documented_response.json).
func TestParseDocumentedResponses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		format    string
		wantText  string
		wantCalls []string // name(id)=args
		wantStop  string
	}{
		{"openai", "", []string{`get_weather(call_abc123)={"location":"Paris, France"}`, `get_weather(call_def456)={"location":"Bogotá, Colombia"}`}, llm.StopToolCalls},
		{"openai-responses", "", []string{`get_weather(call_12345xyz)={"location":"Paris, France"}`}, llm.StopToolCalls},
		{"anthropic", "I'll check the weather in San Francisco.", []string{`get_weather(toolu_01A09q90qw90lq917835lq9)={"location":"San Francisco, CA","unit":"celsius"}`}, llm.StopToolCalls},
		{"gemini", "", []string{`schedule_meeting(schedule_meeting_1)={"attendees":["Bob","Alice"],"date":"2025-03-27","time":"10:00","topic":"Q3 planning"}`}, llm.StopToolCalls},
		{"bedrock", "", []string{`top_song(tooluse_kZJMlvQmRJ6eAyJE5GIl7Q)={"sign":"WZPZ"}`}, llm.StopToolCalls},
	}
	for _, tt := range tests {
		t.Run(tt.format, func(t *testing.T) {
			t.Parallel()
			f, err := FormatByName(tt.format)
			if err != nil {
				t.Fatal(err)
			}
			msg, err := f.ParseResponse(convtest.ReadTestdata(t, tt.format+"/documented_response.json"))
			if err != nil {
				t.Fatal(err)
			}
			if got := llm.MessageText(msg); got != tt.wantText {
				t.Errorf("text = %q, want %q", got, tt.wantText)
			}
			var calls []string
			for _, c := range llm.ToolCalls(msg) {
				calls = append(calls, c.GetName()+"("+c.GetId()+")="+string(canon.EncodeArguments(c.GetArguments())))
			}
			if !equalStrings(calls, tt.wantCalls) {
				t.Errorf("calls = %q, want %q", calls, tt.wantCalls)
			}
			if msg.GetStopReason() != tt.wantStop {
				t.Errorf("stop = %q, want %q", msg.GetStopReason(), tt.wantStop)
			}
		})
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestParseResponseErrors checks broken bodies fail with the right error
// and name the offending call.
func TestParseResponseErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		format Format
		body   string
		want   error
	}{
		{"openai not json", OpenAIChat{}, `{`, llm.ErrMalformed},
		{"openai no choices", OpenAIChat{}, `{"choices":[]}`, llm.ErrMalformed},
		{"openai array arguments", OpenAIChat{}, `{"choices":[{"message":{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"[1]"}}]},"finish_reason":"tool_calls"}]}`, llm.ErrInvalidArguments},
		{"openai truncated arguments", OpenAIChat{}, `{"choices":[{"message":{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\":"}}]}}]}`, llm.ErrInvalidArguments},
		{"anthropic number input", Anthropic{}, `{"type":"message","content":[{"type":"tool_use","id":"t1","name":"f","input":3}]}`, llm.ErrInvalidArguments},
		{"gemini no candidates", Gemini{}, `{"candidates":[]}`, llm.ErrMalformed},
		{"bedrock no message", Bedrock{}, `{"output":{}}`, llm.ErrMalformed},
		{"responses string item args", OpenAIResponses{}, `{"output":[{"type":"function_call","call_id":"c9","name":"f","arguments":"nope"}]}`, llm.ErrInvalidArguments},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := tt.format.ParseResponse([]byte(tt.body))
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			var ae *llm.ArgumentsError
			if errors.As(err, &ae) && ae.Call == "" {
				t.Errorf("arguments error does not name the call: %v", err)
			}
		})
	}
}

// TestConvertTools converts an OpenAI tool list into every other format and back.
func TestConvertTools(t *testing.T) {
	t.Parallel()
	openAI, err := OpenAIChat{}.RenderTools(convtest.CalculatorTools(t), false)
	if err != nil {
		t.Fatal(err)
	}
	for _, to := range Formats() {
		t.Run(to.Name(), func(t *testing.T) {
			t.Parallel()
			body, err := ConvertTools(OpenAIChat{}, to, openAI, false)
			if err != nil {
				t.Fatal(err)
			}
			back, err := ConvertTools(to, OpenAIChat{}, body, false)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(back, openAI) {
				t.Errorf("round trip through %s:\n got %s\nwant %s", to.Name(), back, openAI)
			}
		})
	}
}
