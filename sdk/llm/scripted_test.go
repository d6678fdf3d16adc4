// Tests that drive models with the scripted model of sdk/llm/llmtest (an
// external test package: llmtest imports llm).
package llm_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	kvv1 "github.com/toolfleet/toolfleet/gen/tools/kv/v1"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/internal/canon"
	"github.com/toolfleet/toolfleet/sdk/llm/llmtest"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// TestExactNumbers follows a 64-bit integer from every provider's response,
// stream and text protocol into the canonical call, and from there through
// protojson into a tool's uint64 field, where it must arrive unrounded.
func TestExactNumbers(t *testing.T) {
	t.Parallel()
	complete := func(f llm.Format, body string) func(t *testing.T) (*toolfleetv1.Message, error) {
		return func(t *testing.T) (*toolfleetv1.Message, error) { return f.ParseResponse([]byte(body)) }
	}
	stream := func(f llm.Format, sse string) func(t *testing.T) (*toolfleetv1.Message, error) {
		return func(t *testing.T) (*toolfleetv1.Message, error) {
			return llm.DecodeStream(t.Context(), f, strings.NewReader(sse), nil)
		}
	}
	half := len(llm.BigArgs) / 2
	tests := []struct {
		name string
		get  func(t *testing.T) (*toolfleetv1.Message, error)
	}{
		{"openai chat", complete(llm.OpenAIChat{}, `{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"KV_Get","arguments":`+jsonString(llm.BigArgs)+`}}]},"finish_reason":"tool_calls"}]}`)},
		{"openai responses", complete(llm.OpenAIResponses{}, `{"id":"r","object":"response","model":"m","output":[{"type":"function_call","id":"fc","call_id":"c1","name":"KV_Get","arguments":`+jsonString(llm.BigArgs)+`}]}`)},
		{"anthropic", complete(llm.Anthropic{}, `{"id":"msg","type":"message","role":"assistant","model":"m","content":[{"type":"tool_use","id":"c1","name":"KV_Get","input":`+llm.BigArgs+`}],"stop_reason":"tool_use","usage":{"input_tokens":1,"output_tokens":1}}`)},
		{"gemini", complete(llm.Gemini{}, `{"candidates":[{"content":{"role":"model","parts":[{"function_call":{"name":"KV_Get","args":`+llm.BigArgs+`}}]},"finishReason":"STOP"}]}`)},
		{"bedrock", complete(llm.Bedrock{}, `{"output":{"message":{"role":"assistant","content":[{"toolUse":{"toolUseId":"c1","name":"KV_Get","input":`+llm.BigArgs+`}}]}},"stopReason":"tool_use","usage":{"inputTokens":1,"outputTokens":1}}`)},
		{"openai chat stream", stream(llm.OpenAIChat{}, "data: "+`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"KV_Get","arguments":`+jsonString(llm.BigArgs[:half])+`}}]}}]}`+"\n\n"+
			"data: "+`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":`+jsonString(llm.BigArgs[half:])+`}}]},"finish_reason":"tool_calls"}]}`+"\n\ndata: [DONE]\n\n")},
		{"anthropic stream", stream(llm.Anthropic{}, "event: content_block_start\ndata: "+`{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"c1","name":"KV_Get","input":{}}}`+"\n\n"+
			"event: content_block_delta\ndata: "+`{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":`+jsonString(llm.BigArgs[:half])+`}}`+"\n\n"+
			"event: content_block_delta\ndata: "+`{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":`+jsonString(llm.BigArgs[half:])+`}}`+"\n\n")},
		{"gemini stream", stream(llm.Gemini{}, "data: "+`{"candidates":[{"content":{"role":"model","parts":[{"functionCall":{"name":"KV_Get","args":`+llm.BigArgs+`}}]}}]}`+"\n\n")},
		{"openai responses stream", stream(llm.OpenAIResponses{}, "event: response.output_item.added\ndata: "+`{"type":"response.output_item.added","output_index":0,"item":{"type":"function_call","id":"fc","call_id":"c1","name":"KV_Get","arguments":""}}`+"\n\n"+
			"event: response.function_call_arguments.delta\ndata: "+`{"type":"response.function_call_arguments.delta","output_index":0,"item_id":"fc","delta":`+jsonString(llm.BigArgs[:half])+`}`+"\n\n"+
			"event: response.function_call_arguments.delta\ndata: "+`{"type":"response.function_call_arguments.delta","output_index":0,"item_id":"fc","delta":`+jsonString(llm.BigArgs[half:])+`}`+"\n\n")},
		{"bedrock stream", func(t *testing.T) (*toolfleetv1.Message, error) {
			dec := llm.Bedrock{}.NewStreamDecoder()
			for _, ev := range [][2]string{
				{"contentBlockStart", `{"contentBlockIndex":0,"start":{"toolUse":{"toolUseId":"c1","name":"KV_Get"}}}`},
				{"contentBlockDelta", `{"contentBlockIndex":0,"delta":{"toolUse":{"input":` + jsonString(llm.BigArgs[:half]) + `}}}`},
				{"contentBlockDelta", `{"contentBlockIndex":0,"delta":{"toolUse":{"input":` + jsonString(llm.BigArgs[half:]) + `}}}`},
				{"messageStop", `{"stopReason":"tool_use"}`},
			} {
				if _, err := dec.Decode(ev[0], []byte(ev[1])); err != nil {
					return nil, err
				}
			}
			return dec.Message()
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
			if got := string(canon.EncodeArguments(calls[0].GetArguments())); got != llm.WantBig {
				t.Errorf("arguments = %s\nwant        %s", got, llm.WantBig)
			}
			assertReachesTool(t, calls[0])
		})
	}
}

// TestProviderBlocksStayWithTheirProvider: a conversation holding
// Anthropic's programmatic blocks renders for another provider without
// them (and without failing), and through a scripted stream unchanged.
func TestProviderBlocksStayWithTheirProvider(t *testing.T) {
	t.Parallel()
	req, err := llm.Anthropic{}.ParseRequest(llm.ReadTestdata(t, "anthropic/programmatic_request.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []llm.Format{llm.OpenAIChat{}, llm.OpenAIResponses{}, llm.Gemini{}, llm.Bedrock{}} {
		body, err := f.RenderRequest(req)
		if err != nil {
			t.Fatalf("%s: %v", f.Name(), err)
		}
		if bytes.Contains(body, []byte("srvtoolu_abc123")) || bytes.Contains(body, []byte("code_execution_20250825")) {
			t.Errorf("%s: Anthropic's blocks leaked into %s", f.Name(), body)
		}
	}
	reply := proto.Clone(req.Messages[1]).(*toolfleetv1.Message)
	reply.Container = "container_xyz789"
	got, err := llmtest.NewScripted(llmtest.ScriptTurn{Reply: reply}).Stream(t.Context(), &llm.Request{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got.Model, got.StopReason, reply.Model, reply.StopReason = "", "", "", ""
	if !proto.Equal(got, reply) {
		t.Errorf("scripted stream lost programmatic parts:\n got %v\nwant %v", got, reply)
	}
}

func TestScriptedExhausted(t *testing.T) {
	t.Parallel()
	m := llmtest.NewScripted(llmtest.SayText("only"))
	if _, err := m.Complete(t.Context(), &llm.Request{}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Complete(t.Context(), &llm.Request{}); !errors.Is(err, llm.ErrScriptExhausted) {
		t.Fatalf("err = %v, want ErrScriptExhausted", err)
	}
}

func TestWithRetry(t *testing.T) {
	t.Parallel()
	rateLimited := &llm.APIError{Provider: "test", StatusCode: 429, RetryAfter: 20 * time.Millisecond}
	badRequest := &llm.APIError{Provider: "test", StatusCode: 400}
	tests := []struct {
		name      string
		turns     []llmtest.ScriptTurn
		policy    llm.RetryPolicy
		wantErr   error
		wantCalls int
		minWait   time.Duration
	}{
		{"retries 429 honouring retry-after", []llmtest.ScriptTurn{{Err: rateLimited}, {Err: rateLimited}, llmtest.SayText("ok")}, llm.RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Millisecond}, nil, 3, 40 * time.Millisecond},
		{"gives up after attempts", []llmtest.ScriptTurn{{Err: rateLimited}, {Err: rateLimited}, llmtest.SayText("ok")}, llm.RetryPolicy{MaxAttempts: 2, InitialBackoff: time.Millisecond}, llm.ErrRetryable, 2, 0},
		{"does not retry 400", []llmtest.ScriptTurn{{Err: badRequest}, llmtest.SayText("ok")}, llm.RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Millisecond}, llm.ErrPermanent, 1, 0},
		{"caps the wait", []llmtest.ScriptTurn{{Err: &llm.APIError{StatusCode: 503, RetryAfter: time.Hour}}, llmtest.SayText("ok")}, llm.RetryPolicy{MaxAttempts: 2, MaxBackoff: 5 * time.Millisecond}, nil, 2, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := llmtest.NewScripted(tt.turns...)
			start := time.Now()
			_, err := llm.WithRetry(s, tt.policy).Complete(t.Context(), &llm.Request{})
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if n := len(s.Requests()); n != tt.wantCalls {
				t.Errorf("calls = %d, want %d", n, tt.wantCalls)
			}
			if waited := time.Since(start); waited < tt.minWait {
				t.Errorf("waited %v, want at least %v", waited, tt.minWait)
			}
		})
	}
}

func TestWithRetryStopsOnContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	s := llmtest.NewScripted(llmtest.ScriptTurn{Err: &llm.APIError{StatusCode: 429, RetryAfter: time.Minute}}, llmtest.SayText("late"))
	start := time.Now()
	_, err := llm.WithRetry(s, llm.RetryPolicy{MaxAttempts: 2, MaxBackoff: time.Minute}).Complete(ctx, &llm.Request{})
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, llm.ErrRetryable) {
		t.Fatalf("err = %v", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Error("wait did not end with the context")
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
			if t := llm.MessageText(m); m.GetRole() == toolfleetv1.Role_ROLE_USER && strings.Contains(t, `"content":`) {
				got = t
			}
		}
		if !strings.Contains(got, want) {
			return fmt.Errorf("last tool result %q does not contain %q", got, want)
		}
		return nil
	}
}

func jsonString(s string) string {
	return `"` + strings.ReplaceAll(s, `"`, `\"`) + `"`
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
