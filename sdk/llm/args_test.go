package llm

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	kvv1 "github.com/toolfleet/toolfleet/gen/tools/kv/v1"
	"github.com/toolfleet/toolfleet/sdk/llm/internal/canon"
	"github.com/toolfleet/toolfleet/sdk/tool"
)

// bigArgs is a tool call's arguments as a model writes them: a 64-bit
// revision that float64 would round to 9007199254740992, the largest
// uint64, and numbers float64 holds exactly.
const bigArgs = `{"key":"k","revision":9007199254740993,"max":18446744073709551615,"neg":-9223372036854775807,"safe":9007199254740992,"ratio":0.25,"exp":1e3}`

// wantBig is how the canonical arguments carry bigArgs.
const wantBig = `{"exp":1000,"key":"k","max":"18446744073709551615","neg":"-9223372036854775807","ratio":0.25,"revision":"9007199254740993","safe":9007199254740992}`

func jsonString(s string) string {
	return `"` + strings.ReplaceAll(s, `"`, `\"`) + `"`
}

// TestExactNumbers follows a 64-bit integer from every provider's response,
// stream and text protocol into the canonical call, and from there through
// protojson into a tool's uint64 field, where it must arrive unrounded.
func TestExactNumbers(t *testing.T) {
	t.Parallel()
	complete := func(f Format, body string) func(t *testing.T) (*toolfleetv1.Message, error) {
		return func(t *testing.T) (*toolfleetv1.Message, error) { return f.ParseResponse([]byte(body)) }
	}
	stream := func(f Format, sse string) func(t *testing.T) (*toolfleetv1.Message, error) {
		return func(t *testing.T) (*toolfleetv1.Message, error) {
			return DecodeStream(t.Context(), f, strings.NewReader(sse), nil)
		}
	}
	text := func(p TextProtocol, reply string) func(t *testing.T) (*toolfleetv1.Message, error) {
		return func(t *testing.T) (*toolfleetv1.Message, error) {
			return WithTextProtocol(NewScripted(SayText(reply)), p).Complete(t.Context(), &Request{Messages: []*toolfleetv1.Message{User("get k")}})
		}
	}
	half := len(bigArgs) / 2
	tests := []struct {
		name string
		get  func(t *testing.T) (*toolfleetv1.Message, error)
	}{
		{"openai chat", complete(OpenAIChat{}, `{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"KV_Get","arguments":`+jsonString(bigArgs)+`}}]},"finish_reason":"tool_calls"}]}`)},
		{"openai responses", complete(OpenAIResponses{}, `{"id":"r","object":"response","model":"m","output":[{"type":"function_call","id":"fc","call_id":"c1","name":"KV_Get","arguments":`+jsonString(bigArgs)+`}]}`)},
		{"anthropic", complete(Anthropic{}, `{"id":"msg","type":"message","role":"assistant","model":"m","content":[{"type":"tool_use","id":"c1","name":"KV_Get","input":`+bigArgs+`}],"stop_reason":"tool_use","usage":{"input_tokens":1,"output_tokens":1}}`)},
		{"gemini", complete(Gemini{}, `{"candidates":[{"content":{"role":"model","parts":[{"function_call":{"name":"KV_Get","args":`+bigArgs+`}}]},"finishReason":"STOP"}]}`)},
		{"bedrock", complete(Bedrock{}, `{"output":{"message":{"role":"assistant","content":[{"toolUse":{"toolUseId":"c1","name":"KV_Get","input":`+bigArgs+`}}]}},"stopReason":"tool_use","usage":{"inputTokens":1,"outputTokens":1}}`)},
		{"openai chat stream", stream(OpenAIChat{}, "data: "+`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"KV_Get","arguments":`+jsonString(bigArgs[:half])+`}}]}}]}`+"\n\n"+
			"data: "+`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":`+jsonString(bigArgs[half:])+`}}]},"finish_reason":"tool_calls"}]}`+"\n\ndata: [DONE]\n\n")},
		{"anthropic stream", stream(Anthropic{}, "event: content_block_start\ndata: "+`{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"c1","name":"KV_Get","input":{}}}`+"\n\n"+
			"event: content_block_delta\ndata: "+`{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":`+jsonString(bigArgs[:half])+`}}`+"\n\n"+
			"event: content_block_delta\ndata: "+`{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":`+jsonString(bigArgs[half:])+`}}`+"\n\n")},
		{"gemini stream", stream(Gemini{}, "data: "+`{"candidates":[{"content":{"role":"model","parts":[{"functionCall":{"name":"KV_Get","args":`+bigArgs+`}}]}}]}`+"\n\n")},
		{"openai responses stream", stream(OpenAIResponses{}, "event: response.output_item.added\ndata: "+`{"type":"response.output_item.added","output_index":0,"item":{"type":"function_call","id":"fc","call_id":"c1","name":"KV_Get","arguments":""}}`+"\n\n"+
			"event: response.function_call_arguments.delta\ndata: "+`{"type":"response.function_call_arguments.delta","output_index":0,"item_id":"fc","delta":`+jsonString(bigArgs[:half])+`}`+"\n\n"+
			"event: response.function_call_arguments.delta\ndata: "+`{"type":"response.function_call_arguments.delta","output_index":0,"item_id":"fc","delta":`+jsonString(bigArgs[half:])+`}`+"\n\n")},
		{"bedrock stream", func(t *testing.T) (*toolfleetv1.Message, error) {
			dec := Bedrock{}.NewStreamDecoder()
			for _, ev := range [][2]string{
				{"contentBlockStart", `{"contentBlockIndex":0,"start":{"toolUse":{"toolUseId":"c1","name":"KV_Get"}}}`},
				{"contentBlockDelta", `{"contentBlockIndex":0,"delta":{"toolUse":{"input":` + jsonString(bigArgs[:half]) + `}}}`},
				{"contentBlockDelta", `{"contentBlockIndex":0,"delta":{"toolUse":{"input":` + jsonString(bigArgs[half:]) + `}}}`},
				{"messageStop", `{"stopReason":"tool_use"}`},
			} {
				if _, err := dec.Decode(ev[0], []byte(ev[1])); err != nil {
					return nil, err
				}
			}
			return dec.Message()
		}},
		{"fenced", text(Fenced{}, "~~~tool_call\n{\"name\":\"KV_Get\",\"arguments\":"+bigArgs+"}\n~~~")},
		{"hermes string arguments", text(Hermes{}, "<tool_call>{\"name\":\"KV_Get\",\"arguments\":"+jsonString(bigArgs)+"}</tool_call>")},
		{"auto fallback", func(t *testing.T) (*toolfleetv1.Message, error) {
			return WithAutoFallback(NewScripted(SayText("<tool_call>{\"name\":\"KV_Get\",\"arguments\":"+bigArgs+"}</tool_call>"))).Complete(t.Context(), &Request{})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			msg, err := tt.get(t)
			if err != nil {
				t.Fatal(err)
			}
			calls := ToolCalls(msg)
			if len(calls) != 1 {
				t.Fatalf("calls = %d, want 1", len(calls))
			}
			if got := string(canon.EncodeArguments(calls[0].GetArguments())); got != wantBig {
				t.Errorf("arguments = %s\nwant        %s", got, wantBig)
			}
			assertReachesTool(t, calls[0])
		})
	}
}

// assertReachesTool decodes the call's key and revision the way a worker
// does (sdk/tool.DecodeInputStruct: strict protojson, then protovalidate)
// into KV.Get's input and checks the revision arrived unrounded.
func assertReachesTool(t *testing.T, c *toolfleetv1.ToolCall) {
	t.Helper()
	f := c.GetArguments().GetFields()
	input := &structpb.Struct{Fields: map[string]*structpb.Value{"key": f["key"], "revision": f["revision"]}}
	msg, verr, err := tool.DecodeInputStruct((&kvv1.GetRequest{}).ProtoReflect().Descriptor(), input)
	if err != nil || verr != nil {
		t.Fatalf("tool input %v: %v %v", input, verr, err)
	}
	if got := msg.(*kvv1.GetRequest).GetRevision(); got != 9007199254740993 {
		t.Errorf("revision reached the tool as %d", got)
	}
}

func TestXMLExactNumbers(t *testing.T) {
	t.Parallel()
	tools := []*toolfleetv1.ToolDefinition{typedTool(t)}
	tests := []struct {
		name, text, want string
	}{
		{"integer schema", "<function=Weather_Forecast><parameter=days>9007199254740993</parameter></function>", `{"days":"9007199254740993"}`},
		{"string or integer schema", "<function=Weather_Forecast><parameter=id>18446744073709551615</parameter></function>", `{"id":"18446744073709551615"}`},
		{"number schema", "<function=Weather_Forecast><parameter=ratio>9007199254740993</parameter></function>", `{"ratio":"9007199254740993"}`},
		{"no schema", "<function=Other><parameter=n>9007199254740993</parameter></function>", `{"n":"9007199254740993"}`},
		{"inside an object", "<function=Weather_Forecast><parameter=opts>{\"rev\":9007199254740993}</parameter></function>", `{"opts":{"rev":"9007199254740993"}}`},
		{"small stays a number", "<function=Weather_Forecast><parameter=days>3</parameter></function>", `{"days":3}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, calls, err := XMLFunction{}.Parse(tt.text, tools)
			if err != nil {
				t.Fatal(err)
			}
			if got := string(canon.EncodeArguments(calls[0].GetArguments())); got != tt.want {
				t.Errorf("arguments = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestExactNumber(t *testing.T) {
	t.Parallel()
	tests := []struct {
		text    string
		want    string // JSON of the Value
		wantErr bool
	}{
		{"0", "0", false},
		{"-0", "-0", false},
		{"9007199254740992", "9007199254740992", false},
		{"9007199254740993", `"9007199254740993"`, false},
		{"-9007199254740993", `"-9007199254740993"`, false},
		{"100000000000000000000", "100000000000000000000", false},
		{"123456789012345678901234567890", `"123456789012345678901234567890"`, false},
		{"0.1", "0.1", false},
		{"1e400", "", true},
		{"-1e400", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.text, func(t *testing.T) {
			t.Parallel()
			v, err := ExactNumber(tt.text)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("ExactNumber(%s) = %v, want an error", tt.text, v)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			b, err := protojson.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.ReplaceAll(string(b), " ", ""); got != tt.want {
				t.Errorf("ExactNumber(%s) = %s, want %s", tt.text, got, tt.want)
			}
		})
	}
}

// TestBlockErrorNamesCall checks that a malformed text block's error says
// which call it was, wherever the block lets the name be read.
func TestBlockErrorNamesCall(t *testing.T) {
	t.Parallel()
	tools := []*toolfleetv1.ToolDefinition{typedTool(t)}
	tests := []struct {
		name     string
		p        TextProtocol
		text     string
		wantCall string
		wantMsg  string
		isArgs   bool
	}{
		{"fenced bad json", Fenced{}, "~~~tool_call\n{\"name\":\"A\"}\n~~~\n~~~tool_call\n{\"name\":\"Calculator_Add\",\"arguments\":{\"a\":1,}}\n~~~", "Calculator_Add", "fenced tool-call block 2 (Calculator_Add)", false},
		{"fenced args not an object", Fenced{}, "~~~tool_call\n{\"name\":\"Calculator_Add\",\"arguments\":[1]}\n~~~", "Calculator_Add (call_1)", "fenced tool-call block 1 (Calculator_Add (call_1)): arguments:", true},
		{"fenced unclosed", Fenced{}, "~~~tool_call\n{\"name\":\"Calculator_Add\"}", "Calculator_Add", "block 1 (Calculator_Add): no closing", false},
		{"hermes unclosed", Hermes{}, "<tool_call>{\"name\": \"Calculator_Mul\", \"arguments\": {", "Calculator_Mul", "hermes tool-call block 1 (Calculator_Mul)", false},
		{"hermes string args bad", Hermes{}, "<tool_call>{\"name\":\"Calculator_Add\",\"id\":\"x9\",\"arguments\":\"{nope\"}</tool_call>", "Calculator_Add (x9)", "(Calculator_Add (x9)): arguments:", true},
		{"xml bad parameter", XMLFunction{}, "<function=Weather_Forecast><parameter=days>three</parameter></function>", "Weather_Forecast (call_1)", `xml tool-call block 1 (Weather_Forecast (call_1)): arguments: parameter "days"`, true},
		{"xml unclosed", XMLFunction{}, "<function=Weather_Forecast><parameter=days>3</parameter>", "Weather_Forecast", "xml tool-call block 1 (Weather_Forecast): no closing", false},
		{"name unreadable", Hermes{}, "<tool_call>{oops</tool_call>", "", "hermes tool-call block 1: ", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := tt.p.Parse(tt.text, tools)
			var be *BlockError
			if !errors.As(err, &be) || !errors.Is(err, ErrMalformed) {
				t.Fatalf("err = %v, want a BlockError", err)
			}
			if be.Call != tt.wantCall {
				t.Errorf("Call = %q, want %q", be.Call, tt.wantCall)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("message %q does not contain %q", err, tt.wantMsg)
			}
			if got := errors.Is(err, ErrInvalidArguments); got != tt.isArgs {
				t.Errorf("errors.Is(err, ErrInvalidArguments) = %v, want %v", got, tt.isArgs)
			}
		})
	}
}

// TestOneCallPerTurn makes a model answer with two calls while the request
// allows one, on every path that can produce calls: only the first call is
// returned and no fragment of the second is streamed.
func TestOneCallPerTurn(t *testing.T) {
	t.Parallel()
	first := CallPart("call_1", "Calculator_Add", map[string]any{"a": 1, "b": 2})
	second := CallPart("call_2", "Calculator_Mul", map[string]any{"a": 3, "b": 4})
	native := func() ScriptTurn { return CallTools("Both.", first, second) }
	written := func(p TextProtocol) ScriptTurn { return WriteCalls(p, "Both.", first, second) }
	tests := []struct {
		name   string
		model  func() Model
		stream bool
	}{
		{"scripted complete", func() Model { return NewScripted(native()) }, false},
		{"scripted stream", func() Model { return NewScripted(native()) }, true},
		{"hermes complete", func() Model { return WithTextProtocol(NewScripted(written(Hermes{})), Hermes{}) }, false},
		{"fenced complete", func() Model { return WithTextProtocol(NewScripted(written(Fenced{})), Fenced{}) }, false},
		{"xml complete", func() Model { return WithTextProtocol(NewScripted(written(XMLFunction{})), XMLFunction{}) }, false},
		{"hermes stream", func() Model { return WithTextProtocol(NewScripted(written(Hermes{})), Hermes{}) }, true},
		{"fenced stream", func() Model { return WithTextProtocol(NewScripted(written(Fenced{})), Fenced{}) }, true},
		{"xml stream", func() Model { return WithTextProtocol(NewScripted(written(XMLFunction{})), XMLFunction{}) }, true},
		{"auto fallback complete", func() Model { return WithAutoFallback(NewScripted(written(Hermes{}))) }, false},
		{"auto fallback stream", func() Model { return WithAutoFallback(NewScripted(written(Fenced{}))) }, true},
	}
	for _, tt := range tests {
		for _, parallel := range []bool{false, true} {
			t.Run(tt.name+map[bool]string{false: " one call", true: " parallel"}[parallel], func(t *testing.T) {
				t.Parallel()
				req := &Request{Messages: []*toolfleetv1.Message{User("1+2 and 3*4?")}, Tools: calculatorTools(t), ParallelToolCalls: &parallel}
				var msg *toolfleetv1.Message
				var err error
				streamed := map[string]bool{}
				if tt.stream {
					msg, err = tt.model().Stream(context.WithoutCancel(t.Context()), req, func(d Delta) error {
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
				if got := callStrings(ToolCalls(msg)); !equalStrings(got, want) {
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
	first := CallPart("call_1", "Calculator_Add", map[string]any{"a": 1, "b": 2})
	broken := map[string]string{"fenced": "~~~tool_call\n{\"name\":", "hermes": "<tool_call>{\"name\":", "xml": "<function=Calculator_Mul><parameter=a>",
		"qwen3_coder": "<tool_call>\n<function=Calculator_Mul>\n<parameter=a>", "harmony": "<|channel|>commentary to=functions.Calculator_Mul <|constrain|>json<|message|>{\"a\":",
		"mistral": "[TOOL_CALLS]Calculator_Mul[ARGS]{\"a\":", "llama3_json": "<|python_tag|>{\"name\": \"Calculator_Mul\", \"parameters\": {", "pythonic": "[Calculator_Mul(a=",
		"kimi_k2": "<|tool_call_begin|>functions.Calculator_Mul:1<|tool_call_argument_begin|>{", "glm45": "<tool_call>Calculator_Mul<arg_key>a</arg_key><arg_value>oops",
		"minimax_m2": "<invoke name=\"Calculator_Mul\"><parameter name=\"a\">", "deepseek_v31": "<｜tool▁call▁begin｜>Calculator_Mul<｜tool▁sep｜>{",
		"deepseek_v32": "<｜DSML｜invoke name=\"Calculator_Mul\"><｜DSML｜parameter name=\"a\" string=\"false\">"}
	for _, p := range TextProtocols() {
		if broken[p.Name()] == "" {
			t.Fatalf("no broken block for %s", p.Name())
		}
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s stream=%v", p.Name(), stream), func(t *testing.T) {
				t.Parallel()
				reply := "Adding.\n" + p.RenderCall(first.GetToolCall()) + "\n" + broken[p.Name()]
				m := WithTextProtocol(NewScripted(SayText(reply)), p)
				req := &Request{Messages: []*toolfleetv1.Message{User("1+2?")}, Tools: calculatorTools(t), ParallelToolCalls: new(false)}
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
				if got := callStrings(ToolCalls(msg)); !equalStrings(got, []string{`Calculator_Add(` + renderedID(p, "Calculator_Add", "call_1") + `)={"a":1,"b":2}`}) {
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
	for _, p := range []TextProtocol{Fenced{}, Hermes{}} {
		t.Run(p.Name(), func(t *testing.T) {
			t.Parallel()
			reply := map[string]string{"fenced": "~~~tool_call\n{\"name\":\"T_Do\",\"arguments\":" + args + "}\n~~~", "hermes": "<tool_call>{\"name\":\"T_Do\",\"arguments\":" + args + "}</tool_call>"}[p.Name()]
			msg, err := WithTextProtocol(NewScripted(SayText(reply)), p).Complete(t.Context(), &Request{Messages: []*toolfleetv1.Message{User("go")}, Tools: tools})
			if err != nil {
				t.Fatal(err)
			}
			if got := string(canon.EncodeArguments(ToolCalls(msg)[0].GetArguments())); got != want {
				t.Errorf("arguments = %s\nwant        %s", got, want)
			}
		})
	}
}
