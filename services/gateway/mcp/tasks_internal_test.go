package mcp

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// A task renders per revision: 2025-11-25 names ttl and pollInterval and
// counts an isError result as failed; the extension names ttlMs and
// pollIntervalMs, keeps an isError result completed, and inlines the
// outcome, the refusal, or the approval questions in tasks/get.
func TestTaskWire(t *testing.T) {
	t.Parallel()
	s := New(nil, Options{})
	created := time.Date(2026, 11, 26, 1, 0, 0, 0, time.UTC)
	isError := &TaskState{ID: "x", Status: TaskCompleted, CreatedAt: created,
		Response: &toolfleetv1.CallToolResponse{ToolId: "T.T@1.0.0", Outcome: &toolfleetv1.CallToolResponse_Error{Error: &toolfleetv1.ToolError{Message: "boom"}}}}
	old := s.taskWire(isError, revision{}, false)
	if old["status"] != "failed" || old["ttl"] != DefaultTaskTTL.Milliseconds() || old["pollInterval"] == nil || old["ttlMs"] != nil {
		t.Errorf("2025-11-25: %v", old)
	}
	ext := s.taskWire(isError, revision{extension: true, declared: true}, true)
	res, _ := ext["result"].(interface{ GetMeta() map[string]any })
	if ext["status"] != "completed" || ext["ttlMs"] == nil || ext["pollIntervalMs"] == nil || res == nil || old["createdAt"] != "2026-11-26T01:00:00Z" {
		t.Errorf("2026-07-28: %v", ext)
	}
	// A content result comes back as the content blocks a direct call
	// shows; the same value of a tool that is not one, as JSON text.
	blocks, err := structpb.NewValue(map[string]any{"content": map[string]any{"blocks": []any{map[string]any{"text": "Hello, task!"}}}})
	if err != nil {
		t.Fatal(err)
	}
	s.contentIDs = map[string]bool{"Conformance.Greet@1.0.0": true}
	for id, want := range map[string]string{"Conformance.Greet@1.0.0": "Hello, task!", "Other.Tool@1.0.0": `{"content":{"blocks":[{"text":"Hello, task!"}]}}`} {
		done := &TaskState{ID: "c", Status: TaskCompleted, CreatedAt: created,
			Response: &toolfleetv1.CallToolResponse{Success: true, ToolId: id, Outcome: &toolfleetv1.CallToolResponse_Value{Value: blocks}}}
		b, err := json.Marshal(s.taskWire(done, revision{extension: true, declared: true}, true))
		if err != nil {
			t.Fatal(err)
		}
		var w struct {
			Result struct {
				Content []struct{ Type, Text string } `json:"content"`
			} `json:"result"`
		}
		if err := json.Unmarshal(b, &w); err != nil || len(w.Result.Content) != 1 || w.Result.Content[0].Type != "text" || w.Result.Content[0].Text != want {
			t.Errorf("result of %s: %s, want one text block %q", id, b, want)
		}
	}
	refused := &TaskState{ID: "y", Status: TaskCompleted, CreatedAt: created, Err: status.Error(codes.Unavailable, "the gateway is away")}
	got := s.taskWire(refused, revision{extension: true, declared: true}, true)
	if e, _ := got["error"].(map[string]any); got["status"] != "failed" || e["code"] != int64(-32603) {
		t.Errorf("refused: %v", got)
	}
	args, _ := structpb.NewStruct(map[string]any{"key": "k"})
	waiting := &TaskState{ID: "z", Status: TaskInputRequired, CreatedAt: created, Approvals: []TaskApproval{{CallID: "z/1", ToolID: "KV.Delete@1.0.0", Arguments: args}}}
	b, err := json.Marshal(s.taskWire(waiting, revision{extension: true, declared: true}, true))
	if err != nil {
		t.Fatal(err)
	}
	var w struct {
		InputRequests map[string]struct {
			Method string `json:"method"`
			Params struct {
				Mode string `json:"mode"`
			} `json:"params"`
		} `json:"inputRequests"`
	}
	if err := json.Unmarshal(b, &w); err != nil || w.InputRequests[TaskApprovalPrefix+"z/1"].Method != "elicitation/create" ||
		w.InputRequests[TaskApprovalPrefix+"z/1"].Params.Mode != "form" {
		t.Errorf("input_required: %s", b)
	}
}

// The routing headers of a 2026-07-28 task request must match its body.
func TestTaskHeaders(t *testing.T) {
	t.Parallel()
	ext := revision{extension: true, declared: true}
	h := func(kv ...string) *http.Request {
		r, _ := http.NewRequest(http.MethodPost, "/mcp", nil)
		for i := 0; i < len(kv); i += 2 {
			r.Header.Set(kv[i], kv[i+1])
		}
		return r
	}
	good := h("Mcp-Protocol-Version", "2026-07-28", "Mcp-Method", "tasks/get", "Mcp-Name", "id1")
	if e := checkHeaders(good, "tasks/get", "id1", "2026-07-28", ext); e != nil {
		t.Errorf("matching headers: %v", e)
	}
	for name, r := range map[string]*http.Request{
		"other task":    h("Mcp-Protocol-Version", "2026-07-28", "Mcp-Method", "tasks/get", "Mcp-Name", "id2"),
		"no name":       h("Mcp-Protocol-Version", "2026-07-28", "Mcp-Method", "tasks/get"),
		"other method":  h("Mcp-Protocol-Version", "2026-07-28", "Mcp-Method", "tasks/cancel", "Mcp-Name", "id1"),
		"other version": h("Mcp-Protocol-Version", "2025-11-25", "Mcp-Method", "tasks/get", "Mcp-Name", "id1"),
	} {
		if e := checkHeaders(r, "tasks/get", "id1", "2026-07-28", ext); e == nil || e.Code != codeHeaderMismatch {
			t.Errorf("%s: %v, want -32020", name, e)
		}
	}
	if e := checkHeaders(h(), "tasks/get", "id1", "", revision{}); e != nil {
		t.Errorf("2025-11-25 needs no routing headers: %v", e)
	}
}
