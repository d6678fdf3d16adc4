package wire

import (
	"bytes"
	"encoding/json"
	"testing"

	anthropicsdk "github.com/anthropics/anthropic-sdk-go"
	openaisdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/toolfleet/toolfleet/sdk/llm/internal/convtest"
	"google.golang.org/genai"
)

// TestToolFeaturesAgreeWithSDKs decodes the provider-feature response
// fixtures with the official SDKs and checks that the canonical parse
// reads the same calls: custom tool call inputs (OpenAI Chat and
// Responses), the tool_use after a tool search and the blocks before it
// (Anthropic), thought signatures on parallel calls (Gemini).
func TestToolFeaturesAgreeWithSDKs(t *testing.T) {
	t.Parallel()
	parse := func(f Format, file string) []string {
		t.Helper()
		msg, err := f.ParseResponse(convtest.ReadTestdata(t, f.Name()+"/"+file))
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, p := range msg.GetParts() {
			switch {
			case p.GetToolCall() != nil:
				c := p.GetToolCall()
				out = append(out, "call "+c.GetId()+" "+c.GetName()+" "+c.GetInput()+" "+string(c.GetSignature()))
			case p.GetProviderBlock() != nil:
				out = append(out, "block "+p.GetProviderBlock().GetType())
			}
		}
		return out
	}
	decode := func(f Format, file string, v any) {
		t.Helper()
		if err := json.Unmarshal(convtest.ReadTestdata(t, f.Name()+"/"+file), v); err != nil {
			t.Fatalf("%s %s: the SDK does not decode it: %v", f.Name(), file, err)
		}
	}
	check := func(what string, got, want []string) {
		t.Helper()
		assertSameJSON(t, what, got, want)
	}

	var chat openaisdk.ChatCompletion
	decode(OpenAIChat{}, "custom_tool_response.json", &chat)
	var want []string
	for _, tc := range chat.Choices[0].Message.ToolCalls {
		c := tc.AsCustom()
		want = append(want, "call "+c.ID+" "+c.Custom.Name+" "+c.Custom.Input+" ")
	}
	check("openai custom call", parse(OpenAIChat{}, "custom_tool_response.json"), want)

	for _, file := range []string{"custom_tool_response.json", "tool_search_response.json"} {
		var resp responses.Response
		decode(OpenAIResponses{}, file, &resp)
		want = nil
		for _, it := range resp.Output {
			switch it.Type {
			case "reasoning", "message":
			case "custom_tool_call":
				c := it.AsCustomToolCall()
				want = append(want, "call "+c.CallID+" "+c.Name+" "+c.Input+" ")
			case "function_call":
				c := it.AsFunctionCall()
				want = append(want, "call "+c.CallID+" "+c.Name+"  ")
			default:
				want = append(want, "block "+it.Type)
			}
		}
		check("openai-responses "+file, parse(OpenAIResponses{}, file), want)
	}

	var msg anthropicsdk.Message
	decode(Anthropic{}, "tool_search_response.json", &msg)
	want = nil
	for _, b := range msg.Content {
		switch b.Type {
		case "text":
		case "tool_use":
			u := b.AsToolUse()
			if u.Caller.Type != "direct" {
				t.Errorf("SDK caller = %q, want direct", u.Caller.Type)
			}
			want = append(want, "call "+u.ID+" "+u.Name+"  ")
		default:
			want = append(want, "block "+b.Type)
		}
	}
	check("anthropic tool search", parse(Anthropic{}, "tool_search_response.json"), want)

	var gm genai.GenerateContentResponse
	decode(Gemini{}, "parallel_signatures_response.json", &gm)
	want = nil
	for i, p := range gm.Candidates[0].Content.Parts {
		want = append(want, "call "+p.FunctionCall.Name+"_"+string(rune('1'+i))+" "+p.FunctionCall.Name+"  "+string(p.ThoughtSignature))
	}
	check("gemini signatures", parse(Gemini{}, "parallel_signatures_response.json"), want)
	if sig := gm.Candidates[0].Content.Parts[0].ThoughtSignature; len(sig) == 0 || bytes.Equal(sig, gm.Candidates[0].Content.Parts[1].ThoughtSignature) {
		t.Errorf("fixture: the first call must carry the only signature")
	}
}
