package mcp

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
)

// answerRecorder is a Tasks whose task waits on questions; it records the
// answers it is given and refuses content without "name" as the services
// do (INVALID_ARGUMENT).
type answerRecorder struct {
	Tasks
	st      *TaskState
	answers []string
}

func (a *answerRecorder) GetTask(context.Context, string) (*TaskState, error) { return a.st, nil }

func (a *answerRecorder) AnswerTask(_ context.Context, id, callID, key, action string, content map[string]any) error {
	if action == "accept" && content["name"] == nil {
		return status.Error(codes.InvalidArgument, "the answer does not match the question's schema: name: missing")
	}
	b, _ := json.Marshal(content)
	a.answers = append(a.answers, id+" "+callID+" "+key+" "+action+" "+string(b))
	return nil
}

// A task's tools' questions are its inputRequests, keyed by call and key;
// tasks/update answers each on its own, ignores keys that do not wait, and
// refuses a malformed answer or one the service refuses as invalid params.
func TestTaskQuestions(t *testing.T) {
	t.Parallel()
	s := New(nil, Options{})
	schema, _ := structpb.NewStruct(map[string]any{"type": "object", "properties": map[string]any{"name": map[string]any{"type": "string"}}})
	st := &TaskState{ID: "mcp-p-1", Status: TaskInputRequired, CreatedAt: time.Now(), Questions: []TaskQuestion{
		{CallID: "mcp-p-1/1", Key: "user_name", Message: "What is your name?", Schema: schema},
		{CallID: "mcp-p-1/1", Key: "city", Message: "Where?", Schema: schema},
	}}
	wire := s.taskWire(st, revision{extension: true, declared: true}, true)
	b, _ := json.Marshal(wire["inputRequests"])
	var reqs map[string]map[string]any
	if err := json.Unmarshal(b, &reqs); err != nil || len(reqs) != 2 {
		t.Fatalf("inputRequests %s (%v), want two", b, err)
	}
	if q := reqs["toolfleet/input/mcp-p-1/1#user_name"]; q["method"] != "elicitation/create" || dig(q, "params", "message") != "What is your name?" ||
		dig(q, "params", "requestedSchema", "type") != "object" {
		t.Fatalf("inputRequests %s: want the tool's question keyed by call and key", b)
	}

	tb := &answerRecorder{st: st}
	ctx := t.Context()
	answer := func(key, body string) *jsonrpc.Error {
		_, jerr := s.updateTask(ctx, tb, st.ID, map[string]json.RawMessage{key: json.RawMessage(body)})
		return jerr
	}
	if jerr := answer("toolfleet/input/mcp-p-1/1#user_name", `{"action":"accept","content":{"name":"Alice"}}`); jerr != nil {
		t.Fatal(jerr)
	}
	if jerr := answer("toolfleet/input/mcp-p-1/1#nope", `{"action":"accept","content":{"name":"x"}}`); jerr != nil {
		t.Fatalf("a key that does not wait: %v, want it ignored", jerr)
	}
	if jerr := answer("toolfleet/input/mcp-p-1/1#city", `"yes"`); jerr == nil || jerr.Code != jsonrpc.CodeInvalidParams {
		t.Fatalf("a malformed answer: %v, want invalid params", jerr)
	}
	if jerr := answer("toolfleet/input/mcp-p-1/1#city", `{"action":"accept","content":{"town":"x"}}`); jerr == nil ||
		jerr.Code != jsonrpc.CodeInvalidParams || !strings.Contains(jerr.Message, "name: missing") {
		t.Fatalf("an answer the service refuses: %v, want invalid params with its words", jerr)
	}
	if want := []string{`mcp-p-1 mcp-p-1/1 user_name accept {"name":"Alice"}`}; strings.Join(tb.answers, "|") != strings.Join(want, "|") {
		t.Fatalf("answers %q, want %q", tb.answers, want)
	}
}

// dig reads a path of keys in decoded JSON.
func dig(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}
