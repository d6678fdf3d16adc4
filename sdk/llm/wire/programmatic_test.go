package wire

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/internal/convtest"
)

// jsonField decodes body and returns the value at a path of object keys
// and array indexes ("messages.1.content").
func jsonField(t *testing.T, body []byte, path string) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatal(err)
	}
	for _, key := range strings.Split(path, ".") {
		switch c := v.(type) {
		case map[string]any:
			v = c[key]
		case []any:
			i := 0
			for _, r := range key {
				i = i*10 + int(r-'0')
			}
			if i >= len(c) {
				t.Fatalf("%s: index %d out of range", path, i)
			}
			v = c[i]
		default:
			t.Fatalf("%s: %q is not inside an object or array", path, key)
		}
	}
	return v
}

func assertSameJSON(t *testing.T, what string, got, want any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(want)
		t.Errorf("%s changed on the round trip:\n got %s\nwant %s", what, g, w)
	}
}

// TestAnthropicProgrammaticRequest: a continuation request of Anthropic's
// programmatic tool calling (the documented step 3) goes through the
// canonical form and comes out with the code-execution tool, allowed_callers,
// the container, the server_tool_use block and the tool_use caller unchanged.
func TestAnthropicProgrammaticRequest(t *testing.T) {
	t.Parallel()
	in := convtest.ReadTestdata(t, "anthropic/programmatic_request.json")
	req, err := Anthropic{}.ParseRequest(in)
	if err != nil {
		t.Fatal(err)
	}
	if len(req.Tools) != 1 || !reflect.DeepEqual(req.Tools[0].GetAllowedCallers(), []string{"code_execution_20250825"}) {
		t.Fatalf("tools = %v, want query_database with its allowed_callers", req.Tools)
	}
	if len(req.NativeTools["anthropic"]) != 1 || req.Container != "container_xyz789" {
		t.Fatalf("native tools %s, container %q", req.NativeTools, req.Container)
	}
	assistant := req.Messages[1]
	calls := llm.ToolCalls(assistant)
	if len(calls) != 1 || !proto.Equal(calls[0].GetCaller(), &toolfleetv1.ToolCaller{Type: "code_execution_20250825", ToolId: "srvtoolu_abc123"}) {
		t.Fatalf("calls = %v, want the caller kept", calls)
	}
	if pb := assistant.GetParts()[1].GetProviderBlock(); pb.GetType() != "server_tool_use" || pb.GetProvider() != "anthropic" {
		t.Fatalf("part 1 = %v, want the server_tool_use block", assistant.GetParts()[1])
	}
	out, err := Anthropic{}.RenderRequest(req)
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"tools", "container", "messages.1", "messages.2"} {
		assertSameJSON(t, path, jsonField(t, out, path), jsonField(t, in, path))
	}
}

// TestAnthropicProgrammaticResponses: the documented step-2 response (a
// call made by the code sandbox) and step-4 response (the sandbox's result)
// round-trip, and the streamed step 2 assembles to the same message.
func TestAnthropicProgrammaticResponses(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"programmatic_response.json", "programmatic_final.json"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			in := convtest.ReadTestdata(t, "anthropic/"+name)
			msg, err := Anthropic{}.ParseResponse(in)
			if err != nil {
				t.Fatal(err)
			}
			if msg.GetContainer() != "container_xyz789" {
				t.Errorf("container = %q", msg.GetContainer())
			}
			out, err := Anthropic{}.RenderResponse(msg)
			if err != nil {
				t.Fatal(err)
			}
			assertSameJSON(t, "content", jsonField(t, out, "content"), jsonField(t, in, "content"))
			assertSameJSON(t, "container id", jsonField(t, out, "container.id"), jsonField(t, in, "container.id"))
		})
	}
	t.Run("stream", func(t *testing.T) {
		t.Parallel()
		want, err := Anthropic{}.ParseResponse(convtest.ReadTestdata(t, "anthropic/programmatic_response.json"))
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeStream(t.Context(), Anthropic{}, bytes.NewReader(convtest.ReadTestdata(t, "anthropic/programmatic_stream.sse")), nil)
		if err != nil {
			t.Fatal(err)
		}
		// The streamed server_tool_use block is rebuilt from its start and
		// its input fragments: compare it as JSON, the rest as protos.
		gotBlock, wantBlock := got.GetParts()[1].GetProviderBlock(), want.GetParts()[1].GetProviderBlock()
		assertSameJSON(t, "server_tool_use", jsonField(t, gotBlock.GetJson(), "input"), jsonField(t, wantBlock.GetJson(), "input"))
		assertSameJSON(t, "server_tool_use id", jsonField(t, gotBlock.GetJson(), "id"), jsonField(t, wantBlock.GetJson(), "id"))
		got.Parts[1], want.Parts[1] = nil, nil
		if !proto.Equal(got, want) {
			t.Errorf("streamed message differs:\n got %v\nwant %v", got, want)
		}
	})
}

// TestAnthropicPauseTurn: a paused server-tool turn is not an answer; its
// stop reason survives the round trip so a loop knows to continue it.
func TestAnthropicPauseTurn(t *testing.T) {
	t.Parallel()
	in := []byte(`{"id":"msg_p","type":"message","role":"assistant","model":"claude-opus-4-5","content":[{"type":"server_tool_use","id":"srvtoolu_1","name":"code_execution","input":{"code":"print(1)"}}],"stop_reason":"pause_turn","usage":{"input_tokens":10,"output_tokens":5}}`)
	msg, err := Anthropic{}.ParseResponse(in)
	if err != nil {
		t.Fatal(err)
	}
	if msg.GetStopReason() != llm.StopPaused {
		t.Fatalf("stop reason = %q, want %q", msg.GetStopReason(), llm.StopPaused)
	}
	out, err := Anthropic{}.RenderResponse(msg)
	if err != nil {
		t.Fatal(err)
	}
	assertSameJSON(t, "stop_reason", jsonField(t, out, "stop_reason"), "pause_turn")
	assertSameJSON(t, "content", jsonField(t, out, "content"), jsonField(t, in, "content"))
}
