package main

import (
	"context"
	"io"
	"log/slog"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/internal/devstack/devstacktest"
)

// TestMCPTaskQuestions drives a tool's questions in MCP tasks on the fleet of
// `toolfleet dev --conformance`:
//   - multi_input asks two questions in its task: the owner's console inbox
//     shows them as an MCP task's (another principal's does not), one answered
//     in the console leaves tasks/get's inputRequests while the other waits,
//     and the other answered with tasks/update completes the task;
//   - a client that did not declare elicitation is not asked: the same tool's
//     task ends with the declined call's result, never input_required;
//   - test_tool_with_task (needs input) asks its first round inline
//     (input_required, no task), and the call carrying the answer becomes the
//     task, whose result holds the answer; a client without elicitation is
//     refused with -32021 before anything runs.
func TestMCPTaskQuestions(t *testing.T) {
	t.Parallel()
	stack := devstacktest.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cfg := devConfig{Host: "127.0.0.1", JWTSecret: "mcp-task-questions-secret-mcp-task-questions", Conformance: true}
	svc, err := startDevServices(ctx, stack, cfg, devServiceOptions{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), MemoryStorage: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.stop() })
	addr := svc.fleet.Gateway.Addr()
	scopes := []string{"programs:run", "programs:read", "programs:approve", "tools:call"}
	mcpAlice := &mcpClient{t: t, addr: addr, token: tenantToken(t, cfg.JWTSecret, "alice", scopes...)}
	alice := newConsoleBrowser(t, "http://"+addr)
	alice.signIn("alice")
	bob := newConsoleBrowser(t, "http://"+addr)
	bob.signIn("bob")

	created := mcpAlice.must(ctx, newRev, "tools/call", map[string]any{"name": "multi_input", "arguments": map[string]any{}})
	id, _ := created["taskId"].(string)
	if created["resultType"] != "task" || id == "" {
		t.Fatalf("multi_input = %v, want a task", created)
	}
	st := mcpAlice.waitTask(ctx, newRev, id, "input_required")
	reqs, _ := st["inputRequests"].(map[string]any)
	var nameKey, confirmKey string
	for k := range reqs {
		switch {
		case strings.HasSuffix(k, "#name"):
			nameKey = k
		case strings.HasSuffix(k, "#confirm"):
			confirmKey = k
		}
	}
	if len(reqs) != 2 || nameKey == "" || confirmKey == "" {
		t.Fatalf("input_required task = %v, want the tool's two questions", st)
	}
	callID := strings.TrimSuffix(strings.TrimPrefix(nameKey, "toolfleet/input/"), "#name")

	// The owner's inbox shows both as an MCP task's, with the answer form.
	waitFor(ctx, t, "the inbox to show the task's questions", func() bool {
		_, body := alice.get("/console/inbox")
		return strings.Contains(body, "Do you confirm?")
	})
	_, body := alice.get("/console/inbox")
	for _, want := range []string{"MCP task", `action="/console/programs/` + id + `/answer"`, "What is your name?", `name="key" value="name"`, `name="key" value="confirm"`} {
		if !strings.Contains(body, want) {
			t.Errorf("alice's inbox lacks %s:\n%s", want, body)
		}
	}
	if _, body := bob.get("/console/inbox"); strings.Contains(body, id) || strings.Contains(body, "Do you confirm?") {
		t.Errorf("bob's inbox shows alice's MCP task:\n%s", body)
	}
	answer := url.Values{"call_id": {callID}, "key": {"name"}, "action": {"accept"}, "in.name": {"Ada"}}
	if res, _ := bob.post("/console/programs/"+id+"/answer", answer); res.StatusCode != 404 {
		t.Errorf("bob's answer to alice's MCP task: %d, want 404", res.StatusCode)
	}
	if res, body := alice.post("/console/programs/"+id+"/answer", answer); res.StatusCode != 200 {
		t.Fatalf("answering from the inbox: %d\n%s", res.StatusCode, body)
	}
	st = mcpAlice.must(ctx, newRev, "tasks/get", map[string]any{"taskId": id})
	if reqs, _ := st["inputRequests"].(map[string]any); st["status"] != "input_required" || len(reqs) != 1 || reqs[confirmKey] == nil {
		t.Fatalf("after the console's answer: %v, want input_required with only %s", st, confirmKey)
	}
	mcpAlice.must(ctx, newRev, "tasks/update", map[string]any{"taskId": id,
		"inputResponses": map[string]any{confirmKey: map[string]any{"action": "accept", "content": map[string]any{"confirm": true}}}})
	done := mcpAlice.waitTask(ctx, newRev, id, "completed")
	if text := firstText(done["result"]); text != "Got name Ada and confirm true." {
		t.Errorf("the task's result %v, want both answers", done["result"])
	}

	// Without elicitation the tool is not asked for: its question is declined.
	created = mcpAlice.must(ctx, newRevNoAsk, "tools/call", map[string]any{"name": "multi_input", "arguments": map[string]any{}})
	id, _ = created["taskId"].(string)
	done = mcpAlice.waitTask(ctx, newRevNoAsk, id, "completed")
	if dig(done, "result", "isError") != true || !strings.Contains(firstText(done["result"]), "cannot answer") {
		t.Errorf("multi_input for a client without elicitation: %v, want the declined call's isError result", done)
	}

	// test_tool_with_task: the first round inline, then the task.
	round1 := mcpAlice.must(ctx, newRev, "tools/call", map[string]any{"name": "test_tool_with_task", "arguments": map[string]any{}})
	if round1["resultType"] != "input_required" || round1["taskId"] != nil || dig(round1, "inputRequests", "user_name") == nil {
		t.Fatalf("test_tool_with_task round 1 = %v, want input_required for user_name and no task", round1)
	}
	round2 := mcpAlice.must(ctx, newRev, "tools/call", map[string]any{"name": "test_tool_with_task", "arguments": map[string]any{},
		"inputResponses": map[string]any{"user_name": map[string]any{"action": "accept", "content": map[string]any{"name": "Alice"}}},
		"requestState":   round1["requestState"]})
	id, _ = round2["taskId"].(string)
	if round2["resultType"] != "task" || id == "" || round2["requestState"] != nil {
		t.Fatalf("test_tool_with_task round 2 = %v, want a task", round2)
	}
	done = mcpAlice.waitTask(ctx, newRev, id, "completed")
	if text := firstText(done["result"]); !regexp.MustCompile(`\bAlice\b`).MatchString(text) {
		t.Errorf("the task's result %v, want the name answered inline", done["result"])
	}
	if _, e := mcpAlice.call(ctx, newRevNoAsk, "tools/call", map[string]any{"name": "test_tool_with_task", "arguments": map[string]any{}}); code(e) != -32021 {
		t.Errorf("test_tool_with_task without elicitation: %v, want -32021", e)
	}
}

// firstText is the text of a result's first content block.
func firstText(res any) string {
	blocks, _ := dig(res, "content").([]any)
	if len(blocks) == 0 {
		return ""
	}
	s, _ := dig(blocks[0], "text").(string)
	return s
}
