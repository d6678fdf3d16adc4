// Tests that follow the provider formats into the canonical conversation and
// out to a tool (an external test package, as in sdk/llm).
package wire_test

import (
	"bytes"
	"strings"
	"testing"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/internal/canon"
	"github.com/toolfleet/toolfleet/sdk/llm/internal/convtest"
	"github.com/toolfleet/toolfleet/sdk/llm/llmtest"
	"github.com/toolfleet/toolfleet/sdk/llm/wire"
	"google.golang.org/protobuf/proto"
)

// TestExactNumbers follows a 64-bit integer from every provider's response,
// stream and text protocol into the canonical call, and from there through
// protojson into a tool's uint64 field, where it must arrive unrounded.
func TestExactNumbers(t *testing.T) {
	t.Parallel()
	complete := func(f wire.Format, body string) func(t *testing.T) (*toolfleetv1.Message, error) {
		return func(t *testing.T) (*toolfleetv1.Message, error) { return f.ParseResponse([]byte(body)) }
	}
	stream := func(f wire.Format, sse string) func(t *testing.T) (*toolfleetv1.Message, error) {
		return func(t *testing.T) (*toolfleetv1.Message, error) {
			return wire.DecodeStream(t.Context(), f, strings.NewReader(sse), nil)
		}
	}
	half := len(convtest.BigArgs) / 2
	tests := []struct {
		name string
		get  func(t *testing.T) (*toolfleetv1.Message, error)
	}{
		{"openai chat", complete(wire.OpenAIChat{}, `{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"KV_Get","arguments":`+convtest.JSONString(convtest.BigArgs)+`}}]},"finish_reason":"tool_calls"}]}`)},
		{"openai responses", complete(wire.OpenAIResponses{}, `{"id":"r","object":"response","model":"m","output":[{"type":"function_call","id":"fc","call_id":"c1","name":"KV_Get","arguments":`+convtest.JSONString(convtest.BigArgs)+`}]}`)},
		{"anthropic", complete(wire.Anthropic{}, `{"id":"msg","type":"message","role":"assistant","model":"m","content":[{"type":"tool_use","id":"c1","name":"KV_Get","input":`+convtest.BigArgs+`}],"stop_reason":"tool_use","usage":{"input_tokens":1,"output_tokens":1}}`)},
		{"gemini", complete(wire.Gemini{}, `{"candidates":[{"content":{"role":"model","parts":[{"function_call":{"name":"KV_Get","args":`+convtest.BigArgs+`}}]},"finishReason":"STOP"}]}`)},
		{"bedrock", complete(wire.Bedrock{}, `{"output":{"message":{"role":"assistant","content":[{"toolUse":{"toolUseId":"c1","name":"KV_Get","input":`+convtest.BigArgs+`}}]}},"stopReason":"tool_use","usage":{"inputTokens":1,"outputTokens":1}}`)},
		{"openai chat stream", stream(wire.OpenAIChat{}, "data: "+`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"KV_Get","arguments":`+convtest.JSONString(convtest.BigArgs[:half])+`}}]}}]}`+"\n\n"+
			"data: "+`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":`+convtest.JSONString(convtest.BigArgs[half:])+`}}]},"finish_reason":"tool_calls"}]}`+"\n\ndata: [DONE]\n\n")},
		{"anthropic stream", stream(wire.Anthropic{}, "event: content_block_start\ndata: "+`{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"c1","name":"KV_Get","input":{}}}`+"\n\n"+
			"event: content_block_delta\ndata: "+`{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":`+convtest.JSONString(convtest.BigArgs[:half])+`}}`+"\n\n"+
			"event: content_block_delta\ndata: "+`{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":`+convtest.JSONString(convtest.BigArgs[half:])+`}}`+"\n\n")},
		{"gemini stream", stream(wire.Gemini{}, "data: "+`{"candidates":[{"content":{"role":"model","parts":[{"functionCall":{"name":"KV_Get","args":`+convtest.BigArgs+`}}]}}]}`+"\n\n")},
		{"openai responses stream", stream(wire.OpenAIResponses{}, "event: response.output_item.added\ndata: "+`{"type":"response.output_item.added","output_index":0,"item":{"type":"function_call","id":"fc","call_id":"c1","name":"KV_Get","arguments":""}}`+"\n\n"+
			"event: response.function_call_arguments.delta\ndata: "+`{"type":"response.function_call_arguments.delta","output_index":0,"item_id":"fc","delta":`+convtest.JSONString(convtest.BigArgs[:half])+`}`+"\n\n"+
			"event: response.function_call_arguments.delta\ndata: "+`{"type":"response.function_call_arguments.delta","output_index":0,"item_id":"fc","delta":`+convtest.JSONString(convtest.BigArgs[half:])+`}`+"\n\n")},
		{"bedrock stream", func(t *testing.T) (*toolfleetv1.Message, error) {
			dec := wire.Bedrock{}.NewStreamDecoder()
			for _, ev := range [][2]string{
				{"contentBlockStart", `{"contentBlockIndex":0,"start":{"toolUse":{"toolUseId":"c1","name":"KV_Get"}}}`},
				{"contentBlockDelta", `{"contentBlockIndex":0,"delta":{"toolUse":{"input":` + convtest.JSONString(convtest.BigArgs[:half]) + `}}}`},
				{"contentBlockDelta", `{"contentBlockIndex":0,"delta":{"toolUse":{"input":` + convtest.JSONString(convtest.BigArgs[half:]) + `}}}`},
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
			if got := string(canon.EncodeArguments(calls[0].GetArguments())); got != convtest.WantBig {
				t.Errorf("arguments = %s\nwant        %s", got, convtest.WantBig)
			}
			convtest.AssertReachesTool(t, calls[0])
		})
	}
}

// TestProviderBlocksStayWithTheirProvider: a conversation holding
// Anthropic's programmatic blocks renders for another provider without
// them (and without failing), and through a scripted stream unchanged.
func TestProviderBlocksStayWithTheirProvider(t *testing.T) {
	t.Parallel()
	req, err := wire.Anthropic{}.ParseRequest(convtest.ReadTestdata(t, "anthropic/programmatic_request.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []wire.Format{wire.OpenAIChat{}, wire.OpenAIResponses{}, wire.Gemini{}, wire.Bedrock{}} {
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
