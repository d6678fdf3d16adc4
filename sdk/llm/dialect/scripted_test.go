// Tests that drive the text-protocol wrappers over the scripted model of
// sdk/llm/llmtest (an external test package: llmtest imports llm).
package dialect_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/dialect"
	"github.com/toolfleet/toolfleet/sdk/llm/internal/canon"
	"github.com/toolfleet/toolfleet/sdk/llm/internal/convtest"
	"github.com/toolfleet/toolfleet/sdk/llm/llmtest"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// TestExactNumbers follows a 64-bit integer from every text protocol into the canonical call, and from there through
// protojson into a tool's uint64 field, where it must arrive unrounded.
func TestExactNumbers(t *testing.T) {
	t.Parallel()
	text := func(p llm.TextProtocol, reply string) func(t *testing.T) (*toolfleetv1.Message, error) {
		return func(t *testing.T) (*toolfleetv1.Message, error) {
			return dialect.WithTextProtocol(llmtest.NewScripted(llmtest.SayText(reply)), p).Complete(t.Context(), &llm.Request{Messages: []*toolfleetv1.Message{llm.User("get k")}})
		}
	}
	tests := []struct {
		name string
		get  func(t *testing.T) (*toolfleetv1.Message, error)
	}{
		{"fenced", text(dialect.Fenced{}, "~~~tool_call\n{\"name\":\"KV_Get\",\"arguments\":"+convtest.BigArgs+"}\n~~~")},
		{"hermes string arguments", text(dialect.Hermes{}, "<tool_call>{\"name\":\"KV_Get\",\"arguments\":"+convtest.JSONString(convtest.BigArgs)+"}</tool_call>")},
		{"auto fallback", func(t *testing.T) (*toolfleetv1.Message, error) {
			return dialect.WithAutoFallback(llmtest.NewScripted(llmtest.SayText("<tool_call>{\"name\":\"KV_Get\",\"arguments\":"+convtest.BigArgs+"}</tool_call>"))).Complete(t.Context(), &llm.Request{})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			msg, err := tt.get(t)
			if err != nil {
				t.Fatal(err)
			}
			calls := llm.ToolCalls(msg)
			if len(calls) != 1 {
				t.Fatalf("calls = %d, want 1", len(calls))
			}
			if got := string(canon.EncodeArguments(calls[0].GetArguments())); got != convtest.WantBig {
				t.Errorf("arguments = %s\nwant        %s", got, convtest.WantBig)
			}
			convtest.AssertReachesTool(t, calls[0])
		})
	}
}

// TestOneCallPerTurn makes a model answer with two calls while the request
// allows one, on every path that can produce calls: only the first call is
// returned and no fragment of the second is streamed.
func TestOneCallPerTurn(t *testing.T) {
	t.Parallel()
	first := llm.CallPart("call_1", "Calculator_Add", map[string]any{"a": 1, "b": 2})
	second := llm.CallPart("call_2", "Calculator_Mul", map[string]any{"a": 3, "b": 4})
	native := func() llmtest.ScriptTurn { return llmtest.CallTools("Both.", first, second) }
	written := func(p llm.TextProtocol) llmtest.ScriptTurn { return llmtest.WriteCalls(p, "Both.", first, second) }
	tests := []struct {
		name   string
		model  func() llm.Model
		stream bool
	}{
		{"scripted complete", func() llm.Model { return llmtest.NewScripted(native()) }, false},
		{"scripted stream", func() llm.Model { return llmtest.NewScripted(native()) }, true},
		{"hermes complete", func() llm.Model {
			return dialect.WithTextProtocol(llmtest.NewScripted(written(dialect.Hermes{})), dialect.Hermes{})
		}, false},
		{"fenced complete", func() llm.Model {
			return dialect.WithTextProtocol(llmtest.NewScripted(written(dialect.Fenced{})), dialect.Fenced{})
		}, false},
		{"xml complete", func() llm.Model {
			return dialect.WithTextProtocol(llmtest.NewScripted(written(dialect.XMLFunction{})), dialect.XMLFunction{})
		}, false},
		{"hermes stream", func() llm.Model {
			return dialect.WithTextProtocol(llmtest.NewScripted(written(dialect.Hermes{})), dialect.Hermes{})
		}, true},
		{"fenced stream", func() llm.Model {
			return dialect.WithTextProtocol(llmtest.NewScripted(written(dialect.Fenced{})), dialect.Fenced{})
		}, true},
		{"xml stream", func() llm.Model {
			return dialect.WithTextProtocol(llmtest.NewScripted(written(dialect.XMLFunction{})), dialect.XMLFunction{})
		}, true},
		{"auto fallback complete", func() llm.Model { return dialect.WithAutoFallback(llmtest.NewScripted(written(dialect.Hermes{}))) }, false},
		{"auto fallback stream", func() llm.Model { return dialect.WithAutoFallback(llmtest.NewScripted(written(dialect.Fenced{}))) }, true},
	}
	for _, tt := range tests {
		for _, parallel := range []bool{false, true} {
			t.Run(tt.name+map[bool]string{false: " one call", true: " parallel"}[parallel], func(t *testing.T) {
				t.Parallel()
				req := &llm.Request{Messages: []*toolfleetv1.Message{llm.User("1+2 and 3*4?")}, Tools: convtest.CalculatorTools(t), ParallelToolCalls: &parallel}
				var msg *toolfleetv1.Message
				var err error
				streamed := map[string]bool{}
				if tt.stream {
					msg, err = tt.model().Stream(context.WithoutCancel(t.Context()), req, func(d llm.Delta) error {
						if d.ToolCall != nil && d.ToolCall.ID != "" {
							streamed[d.ToolCall.ID] = true
						}
						return nil
					})
				} else {
					msg, err = tt.model().Complete(t.Context(), req)
				}
				if err != nil {
					t.Fatal(err)
				}
				want := []string{`Calculator_Add(call_1)={"a":1,"b":2}`}
				if parallel && !strings.HasPrefix(tt.name, "xml") { // xml: one call per turn by definition
					want = append(want, `Calculator_Mul(call_2)={"a":3,"b":4}`)
				}
				if got := convtest.CallStrings(llm.ToolCalls(msg)); !dialect.EqualStrings(got, want) {
					t.Errorf("calls = %q, want %q", got, want)
				}
				if !parallel && streamed["call_2"] {
					t.Error("a fragment of the second call was streamed")
				}
			})
		}
	}
}

// TestOneCallIgnoresLaterBlocks: with one call per turn, a malformed block
// after the first is never read, completed or streamed, for every protocol.
func TestOneCallIgnoresLaterBlocks(t *testing.T) {
	t.Parallel()
	first := llm.CallPart("call_1", "Calculator_Add", map[string]any{"a": 1, "b": 2})
	broken := map[string]string{"fenced": "~~~tool_call\n{\"name\":", "hermes": "<tool_call>{\"name\":", "xml": "<function=Calculator_Mul><parameter=a>",
		"qwen3_coder": "<tool_call>\n<function=Calculator_Mul>\n<parameter=a>", "harmony": "<|channel|>commentary to=functions.Calculator_Mul <|constrain|>json<|message|>{\"a\":",
		"mistral": "[TOOL_CALLS]Calculator_Mul[ARGS]{\"a\":", "llama3_json": "<|python_tag|>{\"name\": \"Calculator_Mul\", \"parameters\": {", "pythonic": "[Calculator_Mul(a=",
		"kimi_k2": "<|tool_call_begin|>functions.Calculator_Mul:1<|tool_call_argument_begin|>{", "glm45": "<tool_call>Calculator_Mul<arg_key>a</arg_key><arg_value>oops",
		"minimax_m2": "<invoke name=\"Calculator_Mul\"><parameter name=\"a\">", "deepseek_v31": "<｜tool▁call▁begin｜>Calculator_Mul<｜tool▁sep｜>{",
		"deepseek_v32": "<｜DSML｜invoke name=\"Calculator_Mul\"><｜DSML｜parameter name=\"a\" string=\"false\">",
		"qwen35":       "<tool_call>\n<function=Calculator_Mul>\n<parameter=a>", "glm47": "<tool_call>Calculator_Mul<arg_key>a</arg_key><arg_value>oops",
		"gemma4": "<|tool_call>call:Calculator_Mul{a:", "llama4_pythonic": "[Calculator_Mul(a=", "llama4_json": "<|python_tag|>{\"name\": \"Calculator_Mul\", \"parameters\": {",
		"deepseek_v4":  "<｜DSML｜tool_calls><｜DSML｜invoke name=\"Calculator_Mul\"><｜DSML｜parameter name=\"a\" string=\"false\">",
		"deepseek_v41": "<｜DSML｜ calls><｜DSML｜ invoke name=\"Calculator_Mul\"><｜DSML｜ parameter name=\"a\" string=\"false\">",
		"kimi_k3":      "<|open|>tools<|sep|><|open|>call tool=\"Calculator_Mul\" index=\"2\"<|sep|><|open|>argument key=\"a\" type=\"number\"<|sep|>",
		"minimax_m3":   "]<]minimax[>[<tool_call>]<]minimax[>[<invoke name=\"Calculator_Mul\">]<]minimax[>[<a>"}
	for _, p := range dialect.TextProtocols() {
		if broken[p.Name()] == "" {
			t.Fatalf("no broken block for %s", p.Name())
		}
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s stream=%v", p.Name(), stream), func(t *testing.T) {
				t.Parallel()
				reply := "Adding.\n" + p.RenderCall(first.GetToolCall()) + "\n" + broken[p.Name()]
				m := dialect.WithTextProtocol(llmtest.NewScripted(llmtest.SayText(reply)), p)
				req := &llm.Request{Messages: []*toolfleetv1.Message{llm.User("1+2?")}, Tools: convtest.CalculatorTools(t), ParallelToolCalls: new(false)}
				var msg *toolfleetv1.Message
				var err error
				if stream {
					msg, err = m.Stream(t.Context(), req, nil)
				} else {
					msg, err = m.Complete(t.Context(), req)
				}
				if err != nil {
					t.Fatal(err)
				}
				if got := convtest.CallStrings(llm.ToolCalls(msg)); !dialect.EqualStrings(got, []string{`Calculator_Add(` + dialect.RenderedID(p, "Calculator_Add", "call_1") + `)={"a":1,"b":2}`}) {
					t.Errorf("calls = %q", got)
				}
			})
		}
	}
}

// TestFitNumbers: a big integer stays exact text only where the tool's
// schema can take text (64-bit integer fields, or fields it does not
// describe); a number-only field gets a number, which validation accepts.
func TestFitNumbers(t *testing.T) {
	t.Parallel()
	schema, err := structpb.NewStruct(map[string]any{
		"type": "object",
		"properties": map[string]any{
			"a":     map[string]any{"type": "number"},
			"a2":    map[string]any{"type": "number"},
			"id":    map[string]any{"type": []any{"integer", "string"}, "format": "int64"},
			"n":     map[string]any{"type": "integer"},
			"label": map[string]any{"type": "string"},
			"list":  map[string]any{"type": "array", "items": map[string]any{"type": "number"}},
			"obj":   map[string]any{"type": "object", "properties": map[string]any{"x": map[string]any{"type": "number"}}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	tools := []*toolfleetv1.ToolDefinition{{ModelName: "T_Do", InputSchema: schema}}
	args := `{"a":9007199254740993,"a2":"12","id":9007199254740993,"n":9007199254740993,"label":"9007199254740993","list":[9007199254740993],"obj":{"x":9007199254740993},"extra":9007199254740993}`
	want := `{"a":9007199254740992,"a2":12,"extra":"9007199254740993","id":"9007199254740993","label":"9007199254740993","list":[9007199254740992],"n":"9007199254740993","obj":{"x":9007199254740992}}`
	for _, p := range []llm.TextProtocol{dialect.Fenced{}, dialect.Hermes{}} {
		t.Run(p.Name(), func(t *testing.T) {
			t.Parallel()
			reply := map[string]string{"fenced": "~~~tool_call\n{\"name\":\"T_Do\",\"arguments\":" + args + "}\n~~~", "hermes": "<tool_call>{\"name\":\"T_Do\",\"arguments\":" + args + "}</tool_call>"}[p.Name()]
			msg, err := dialect.WithTextProtocol(llmtest.NewScripted(llmtest.SayText(reply)), p).Complete(t.Context(), &llm.Request{Messages: []*toolfleetv1.Message{llm.User("go")}, Tools: tools})
			if err != nil {
				t.Fatal(err)
			}
			if got := string(canon.EncodeArguments(llm.ToolCalls(msg)[0].GetArguments())); got != want {
				t.Errorf("arguments = %s\nwant        %s", got, want)
			}
		})
	}
}

// TestDialectStreamModel runs a dialect model through WithTextProtocol:
// each call reaches onDelta as one ToolCall delta as soon as it is
// complete, in order with the text, and no marker is ever shown; with one
// call per turn the stream stops after the first call.
func TestDialectStreamModel(t *testing.T) {
	t.Parallel()
	for _, tt := range dialect.DialectCases() {
		if len(tt.WantCalls) < 2 {
			continue
		}
		for _, oneCall := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s %s one=%v", tt.D, tt.Name, oneCall), func(t *testing.T) {
				t.Parallel()
				m := dialect.WithTextProtocol(llmtest.NewScripted(llmtest.SayText(tt.Text)), tt.D)
				req := &llm.Request{Messages: []*toolfleetv1.Message{llm.User("weather?")}, Tools: []*toolfleetv1.ToolDefinition{convtest.TypedTool(t)}, ParallelToolCalls: new(!oneCall)}
				var order []string
				var shown strings.Builder
				msg, err := m.Stream(t.Context(), req, func(d llm.Delta) error {
					if d.Text != "" {
						shown.WriteString(d.Text)
						order = append(order, "text")
					}
					if d.ToolCall != nil {
						order = append(order, "call "+d.ToolCall.ID)
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				want := tt.WantCalls
				if oneCall {
					want = want[:1]
				}
				if got := convtest.CallStrings(llm.ToolCalls(msg)); !dialect.EqualStrings(got, want) {
					t.Errorf("calls = %q, want %q", got, want)
				}
				calls := 0
				for _, o := range order {
					if strings.HasPrefix(o, "call ") {
						calls++
					}
				}
				if calls != len(want) {
					t.Errorf("%d call deltas, want %d: %q", calls, len(want), order)
				}
				// With one call, what follows it is not read, so not shown.
				if got := strings.TrimSpace(shown.String()); got != tt.WantText && (!oneCall || !strings.HasPrefix(tt.WantText, got)) {
					t.Errorf("shown %q, want %q", shown.String(), tt.WantText)
				}
			})
		}
	}
}

// TestAutoFallbackDialect: tool_protocol auto parses the dialect the model's
// name says it speaks in a native model's text.
func TestAutoFallbackDialect(t *testing.T) {
	t.Parallel()
	reply := `Checking.<|tool_calls_section_begin|><|tool_call_begin|>functions.Weather_Forecast:0<|tool_call_argument_begin|>{"city":"A"}<|tool_call_end|><|tool_calls_section_end|>`
	for _, stream := range []bool{false, true} {
		m := dialect.WithAutoFallback(llmtest.NewScripted(llmtest.SayText(reply)))
		req := &llm.Request{Model: "moonshotai/Kimi-K2-Instruct", Messages: []*toolfleetv1.Message{llm.User("weather?")}, Tools: []*toolfleetv1.ToolDefinition{convtest.TypedTool(t)}}
		complete := m.Complete
		if stream {
			complete = func(ctx context.Context, req *llm.Request) (*toolfleetv1.Message, error) {
				return m.Stream(ctx, req, nil)
			}
		}
		msg, err := complete(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		if got := convtest.CallStrings(llm.ToolCalls(msg)); !dialect.EqualStrings(got, []string{`Weather_Forecast(functions.Weather_Forecast:0)={"city":"A"}`}) || llm.MessageText(msg) != "Checking." {
			t.Errorf("stream=%v: %q %q", stream, llm.MessageText(msg), got)
		}
	}
}

// TestHarmonyAnalysisIsThinking: gpt-oss's analysis channel is reasoning.
// It never reaches the text; it becomes the message's thinking part, in a
// parse, in a TextDecoder fed small chunks, and in a streamed turn (as
// Thinking deltas) of a model taught harmony.
func TestHarmonyAnalysisIsThinking(t *testing.T) {
	t.Parallel()
	tools := []*toolfleetv1.ToolDefinition{convtest.TypedTool(t)}
	withCall := `<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary to=functions.Weather_Forecast <|constrain|>json<|message|>{"city":"Tokyo","days":2}<|call|>`
	final := `<|channel|>analysis<|message|>It is sunny per the tool.<|end|><|start|>assistant<|channel|>final<|message|>It is sunny in Oslo.<|return|>`
	kinds := func(m *toolfleetv1.Message) []string {
		var out []string
		for _, p := range m.GetParts() {
			switch {
			case p.GetThinking() != nil:
				out = append(out, "thinking "+p.GetThinking().GetText())
			case p.GetToolCall() != nil:
				out = append(out, "call "+p.GetToolCall().GetName())
			default:
				out = append(out, "text "+p.GetText())
			}
		}
		return out
	}
	for _, tt := range []struct {
		reply string
		want  []string
	}{
		{withCall, []string{"thinking Need the weather.", "call Weather_Forecast"}},
		{final, []string{"thinking It is sunny per the tool.", "text It is sunny in Oslo."}},
		{`<|channel|>analysis<|message|>Let me th`, []string{"thinking Let me th"}},
	} {
		msg, err := dialect.ParseAuto(llm.NewMessage(toolfleetv1.Role_ROLE_ASSISTANT, llm.Text(tt.reply)), dialect.Harmony, tools)
		if err != nil {
			t.Fatal(err)
		}
		if got := kinds(msg); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%q: parts %q, want %q", tt.reply, got, tt.want)
		}
		dec, _ := dialect.NewTextDecoder(dialect.Harmony, tools)
		var text, thinking strings.Builder
		for i := 0; i < len(tt.reply); i += 5 {
			s, _, err := dec.Write(tt.reply[i:min(i+5, len(tt.reply))])
			if err != nil {
				t.Fatal(err)
			}
			text.WriteString(s)
			thinking.WriteString(dec.Thinking())
		}
		s, _, err := dec.Close()
		if err != nil {
			t.Fatal(err)
		}
		text.WriteString(s)
		thinking.WriteString(dec.Thinking())
		if want := strings.TrimPrefix(tt.want[0], "thinking "); thinking.String() != want || strings.Contains(text.String(), want) || strings.Contains(text.String(), "<|") {
			t.Errorf("%q streamed: thinking %q, text %q", tt.reply, thinking.String(), text.String())
		}
	}

	m := dialect.WithTextProtocol(llmtest.NewScripted(llmtest.ScriptTurn{Reply: llm.NewMessage(toolfleetv1.Role_ROLE_ASSISTANT, llm.Text(withCall))}), dialect.Harmony)
	var streamed strings.Builder
	msg, err := m.Stream(t.Context(), &llm.Request{Tools: tools, Messages: []*toolfleetv1.Message{llm.User("weather?")}}, func(d llm.Delta) error {
		streamed.WriteString(d.Thinking)
		if strings.Contains(d.Text, "Need the weather") {
			t.Errorf("reasoning streamed as text: %q", d.Text)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if streamed.String() != "Need the weather." || !reflect.DeepEqual(kinds(msg), []string{"thinking Need the weather.", "call Weather_Forecast"}) {
		t.Errorf("streamed thinking %q, message %q", streamed.String(), kinds(msg))
	}
}

// TestXMLOneCallPerTurn: the xml prompt protocol is one call per turn by
// definition, so a second block after the first </function> is the model
// rambling: never parsed, completed, streamed or executed, even when the
// request allows parallel calls.
func TestXMLOneCallPerTurn(t *testing.T) {
	t.Parallel()
	reply := "Reading.\n<tool_call>\n<function=Read>\n<parameter=path>\na.txt\n</parameter>\n</function>\n</tool_call> Trailing <function=rm>\n<parameter=path>\n/\n</parameter>\n</function>"
	text, calls, err := dialect.XMLFunction{}.Parse(reply, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := convtest.CallStrings(calls); !dialect.EqualStrings(got, []string{`Read(call_1)={"path":"a.txt"}`}) || text != "Reading." {
		t.Fatalf("Parse = %q, %q", text, got)
	}
	for _, stream := range []bool{false, true} {
		m := dialect.WithTextProtocol(llmtest.NewScripted(llmtest.SayText(reply)), dialect.XMLFunction{})
		req := &llm.Request{Messages: []*toolfleetv1.Message{llm.User("read a.txt")}, ParallelToolCalls: new(true)}
		var msg *toolfleetv1.Message
		var shown strings.Builder
		if stream {
			msg, err = m.Stream(t.Context(), req, func(d llm.Delta) error { shown.WriteString(d.Text); return nil })
		} else {
			msg, err = m.Complete(t.Context(), req)
		}
		if err != nil {
			t.Fatal(err)
		}
		if got := convtest.CallStrings(llm.ToolCalls(msg)); !dialect.EqualStrings(got, []string{`Read(call_1)={"path":"a.txt"}`}) {
			t.Errorf("stream=%v: calls = %q", stream, got)
		}
		if strings.Contains(shown.String(), "Trailing") || strings.Contains(llm.MessageText(msg), "rm") {
			t.Errorf("stream=%v: text after the first block kept: shown %q, message %q", stream, shown.String(), llm.MessageText(msg))
		}
	}
}

func TestAutoFallback(t *testing.T) {
	t.Parallel()
	m := dialect.WithAutoFallback(llmtest.NewScripted(llmtest.SayText("<tool_call>{\"name\":\"Calculator_Add\",\"arguments\":{\"a\":1,\"b\":2}}</tool_call>")))
	msg, err := m.Complete(t.Context(), &llm.Request{Tools: convtest.CalculatorTools(t)})
	if err != nil {
		t.Fatal(err)
	}
	if got := convtest.CallStrings(llm.ToolCalls(msg)); !dialect.EqualStrings(got, []string{`Calculator_Add(call_1)={"a":1,"b":2}`}) {
		t.Errorf("calls = %q", got)
	}
}

// TestTextProtocolOneCallPerTurn cuts a streamed XML-function reply right
// after the first </function> when the request allows one call per turn,
// and never shows the block's text to the caller.
func TestTextProtocolOneCallPerTurn(t *testing.T) {
	t.Parallel()
	first := llm.CallPart("call_1", "Calculator_Add", map[string]any{"a": 1, "b": 2})
	second := llm.CallPart("call_2", "Calculator_Mul", map[string]any{"a": 3, "b": 4})
	script := llmtest.NewScripted(llmtest.WriteCalls(dialect.XMLFunction{}, "Let me add.", first, second))
	script.ChunkSize = 5
	parallel := false
	var shown strings.Builder
	msg, err := dialect.WithTextProtocol(script, dialect.XMLFunction{}).Stream(t.Context(), &llm.Request{Messages: []*toolfleetv1.Message{llm.User("1+2?")}, Tools: convtest.CalculatorTools(t), ParallelToolCalls: &parallel}, func(d llm.Delta) error {
		shown.WriteString(d.Text)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := convtest.CallStrings(llm.ToolCalls(msg)); !dialect.EqualStrings(got, []string{`Calculator_Add(call_1)={"a":1,"b":2}`}) {
		t.Errorf("calls = %q, want only the first", got)
	}
	if shown.String() != "Let me add.\n\n" {
		t.Errorf("shown = %q", shown.String())
	}
	if got := llm.MessageText(msg); got != "Let me add." {
		t.Errorf("message text = %q, want the text before the call", got)
	}
}

// TestFreeTextCallsElsewhere: the scripted model streams a free-text call
// unchanged, and every text protocol writes it as arguments {"input": text}.
func TestFreeTextCallsElsewhere(t *testing.T) {
	t.Parallel()
	input := `print("hi")`
	reply := llm.NewMessage(toolfleetv1.Role_ROLE_ASSISTANT, llm.Text("Running it."), &toolfleetv1.Part{Kind: &toolfleetv1.Part_ToolCall{ToolCall: &toolfleetv1.ToolCall{Id: "call_c", Name: "code_exec", Input: &input}}})
	got, err := llmtest.NewScripted(llmtest.ScriptTurn{Reply: proto.Clone(reply).(*toolfleetv1.Message)}).Stream(t.Context(), &llm.Request{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c := llm.ToolCalls(got); len(c) != 1 || c[0].Input == nil || c[0].GetInput() != input || c[0].GetArguments() != nil {
		t.Fatalf("scripted calls = %v, want the free-text call", c)
	}
	for _, p := range dialect.TextProtocols() {
		if s := p.RenderCall(llm.ToolCalls(reply)[0]); !strings.Contains(s, "input") || !strings.Contains(s, "print(") {
			t.Errorf("%s: %q lacks the input", p.Name(), s)
		}
	}
}

// TestScriptedConversation drives a three-turn tool conversation with a
// scripted model, natively and through each text protocol, completed and
// streamed.
func TestScriptedConversation(t *testing.T) {
	t.Parallel()
	type variant struct {
		name  string
		proto llm.TextProtocol
	}
	variants := []variant{{"native", nil}}
	for _, p := range dialect.TextProtocols() {
		variants = append(variants, variant{p.Name(), p})
	}
	for _, v := range variants {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/stream=%v", v.name, stream), func(t *testing.T) {
				t.Parallel()
				say := func(text string, calls ...*toolfleetv1.Part) llmtest.ScriptTurn {
					if v.proto == nil {
						return llmtest.CallTools(text, calls...)
					}
					return llmtest.WriteCalls(v.proto, text, calls...)
				}
				turn2 := say("Now the product.", llm.CallPart("call_2", "Calculator_Mul", map[string]any{"a": 5, "b": 4}))
				turn2.Check = lastResultIs("5")
				turn3 := llmtest.SayText("(2+3)*4 = 20.")
				turn3.Check = lastResultIs("20")
				script := llmtest.NewScripted(say("First the sum.", llm.CallPart("call_1", "Calculator_Add", map[string]any{"a": 2, "b": 3})), turn2, turn3)
				var m llm.Model = script
				if v.proto != nil {
					m = dialect.WithTextProtocol(script, v.proto)
				}
				req := &llm.Request{Messages: []*toolfleetv1.Message{llm.User("What is (2+3)*4?")}, Tools: convtest.CalculatorTools(t)}
				msgs, err := agentLoop(t.Context(), m, req, stream)
				if err != nil {
					t.Fatal(err)
				}
				if got := llm.MessageText(msgs[len(msgs)-1]); got != "(2+3)*4 = 20." {
					t.Errorf("final answer = %q", got)
				}
				if len(msgs) != 6 || script.Remaining() != 0 {
					t.Errorf("messages = %d, remaining turns = %d", len(msgs), script.Remaining())
				}
				ids := map[string]bool{}
				for _, m := range msgs {
					for _, c := range llm.ToolCalls(m) {
						if ids[c.GetId()] {
							t.Errorf("call id %q repeated in the conversation", c.GetId())
						}
						ids[c.GetId()] = true
					}
				}
				if v.proto != nil {
					sent := script.Requests()[0]
					if sent.Tools != nil || !strings.Contains(llm.MessageText(sent.Messages[0]), "Calculator_Add") {
						t.Errorf("text-protocol request keeps native tools or lacks the catalog")
					}
				}
			})
		}
	}
}

// agentLoop runs model turns, executing calls, until a turn has no calls.
func agentLoop(ctx context.Context, m llm.Model, req *llm.Request, stream bool) ([]*toolfleetv1.Message, error) {
	for turn := 0; turn < 10; turn++ {
		var msg *toolfleetv1.Message
		var err error
		if stream {
			msg, err = m.Stream(ctx, req, nil)
		} else {
			msg, err = m.Complete(ctx, req)
		}
		if err != nil {
			return nil, err
		}
		req.Messages = append(req.Messages, msg)
		calls := llm.ToolCalls(msg)
		if len(calls) == 0 {
			return req.Messages, nil
		}
		results := llm.NewMessage(toolfleetv1.Role_ROLE_TOOL)
		for _, c := range calls {
			results.Parts = append(results.Parts, runCalculator(c))
		}
		req.Messages = append(req.Messages, results)
	}
	return nil, errors.New("too many turns")
}

// lastResultIs checks that the model was sent the result of its previous calls.
func lastResultIs(want string) func(*llm.Request) error {
	return func(r *llm.Request) error {
		got := ""
		for _, m := range r.Messages {
			for _, p := range m.GetParts() {
				if res := p.GetToolResult(); res != nil {
					got = res.GetContent()
				}
			}
			if t := llm.MessageText(m); m.GetRole() == toolfleetv1.Role_ROLE_USER && (strings.Contains(t, `"content":`) || strings.Contains(t, "<|tool_response>")) {
				got = t
			}
		}
		if !strings.Contains(got, want) {
			return fmt.Errorf("last tool result %q does not contain %q", got, want)
		}
		return nil
	}
}

// runCalculator executes calculator calls the way an agent loop would.
func runCalculator(c *toolfleetv1.ToolCall) *toolfleetv1.Part {
	args := c.GetArguments().AsMap()
	a, _ := args["a"].(float64)
	b, _ := args["b"].(float64)
	switch c.GetName() {
	case "Calculator_Add":
		return llm.ResultPart(c.GetId(), c.GetName(), fmt.Sprint(a+b), false)
	case "Calculator_Mul":
		return llm.ResultPart(c.GetId(), c.GetName(), fmt.Sprint(a*b), false)
	}
	return llm.ResultPart(c.GetId(), c.GetName(), "unknown tool "+c.GetName(), true)
}
