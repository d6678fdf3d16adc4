package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/toolfleet/toolfleet/internal/devstack/devstacktest"
	"github.com/toolfleet/toolfleet/orchestrator/agent"
	"github.com/toolfleet/toolfleet/orchestrator/agent/agenttest"
	"github.com/toolfleet/toolfleet/orchestrator/runner"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/llmtest"
)

// cliRun is one CLI invocation against a fleet: stdout and stderr apart.
type cliRun struct {
	out, errOut string
	err         error
}

// TestEveryVerbPrintsJSON runs every CLI verb that prints data with -o json
// (and a few with -o yaml) against what `toolfleet dev` runs — the gateway
// with the bundled workers, the AgentService and the ProgramService mounted,
// the orchestrator on embedded Temporal — and parses what it prints.
func TestEveryVerbPrintsJSON(t *testing.T) {
	t.Parallel()
	stack := devstacktest.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 6*time.Minute)
	defer cancel()
	agents, programs := &agentMount{}, &programMount{}
	models := agent.NewResolver()
	models.Register("json", &agenttest.ByTurn{Turns: []llmtest.ScriptTurn{
		llmtest.CallTools("Adding.", llm.CallPart("c1", "Calculator_Add", map[string]any{"a": 2, "b": 3})),
		llmtest.SayText("2 plus 3 is 5."),
	}})
	// A key the operator bound to OpenAI's endpoint, never set: a run that
	// names it is refused at start.
	endpoints, err := agent.ParseEndpoints("env:TOOLFLEET_MODEL_KEY_NEVER_SET_IN_TESTS=default")
	if err != nil {
		t.Fatal(err)
	}
	models.Endpoints = endpoints
	f, o := startConfigured(ctx, t, stack, models, func(c *runner.Config) { c.Endpoints = endpoints }, agents.mount(), programs.mount())
	agents.serve(o, f.Gateway)
	programs.serve(o, f.Gateway)
	gw := f.Gateway.Addr()
	began := time.Now()

	cli := func(args ...string) cliRun {
		t.Helper()
		var out, errOut bytes.Buffer
		root := newRootCommand()
		root.SetArgs(args)
		root.SetOut(&out)
		root.SetErr(&errOut)
		root.SetIn(strings.NewReader(""))
		err := root.ExecuteContext(ctx)
		return cliRun{out.String(), errOut.String(), err}
	}
	// object runs a verb that must succeed and decodes its one document.
	object := func(args ...string) map[string]any {
		t.Helper()
		r := cli(append(args, "--gateway", gw)...)
		if r.err != nil {
			t.Fatalf("%s: %v\n%s%s", strings.Join(args, " "), r.err, r.out, r.errOut)
		}
		var m map[string]any
		decode(t, args, r.out, &m)
		return m
	}
	array := func(args ...string) []map[string]any {
		t.Helper()
		r := cli(append(args, "--gateway", gw)...)
		if r.err != nil {
			t.Fatalf("%s: %v\n%s%s", strings.Join(args, " "), r.err, r.out, r.errOut)
		}
		var a []map[string]any
		decode(t, args, r.out, &a)
		return a
	}

	t.Logf("%s: %s", time.Since(began).Round(time.Millisecond), "tools")
	// tools
	if defs := array("tools", "list", "-o", "json"); !hasField(defs, "id", "Calculator.Add@1.0.0") {
		t.Errorf("tools list -o json lacks Calculator.Add@1.0.0: %v", defs)
	}
	if defs := array("tools", "list", "-o", "yaml"); !hasField(defs, "id", "Calculator.Add@1.0.0") {
		t.Errorf("tools list -o yaml lacks Calculator.Add@1.0.0: %v", defs)
	}
	if d := object("tools", "describe", "Calculator.Add", "-o", "json"); d["id"] != "Calculator.Add@1.0.0" || d["inputSchema"] == nil {
		t.Errorf("tools describe -o json = %v", d)
	}
	if s := object("tools", "search", "add two numbers", "-o", "json"); s["results"] == nil {
		t.Errorf("tools search -o json = %v", s)
	}
	if c := object("tools", "call", "Calculator.Add", `{"a": 2, "b": 3}`, "-o", "yaml"); c["success"] == nil {
		t.Errorf("tools call -o yaml = %v", c)
	}
	r := cli("tools", "call", "Calculator.Add", `{"a": "two"}`, "-o", "json", "--gateway", gw)
	var refused map[string]map[string]any
	decode(t, []string{"tools call (invalid)"}, r.out, &refused)
	if exitCode(r.err) != exitValidation || refused["error"]["kind"] != "validation" {
		t.Errorf("tools call with invalid input: exit %d, %v", exitCode(r.err), refused)
	}

	t.Logf("%s: %s", time.Since(began).Round(time.Millisecond), "agent")
	// agent: a run whose call waits for approval, approved, watched, sent a
	// follow-up, then cancelled.
	if s := object("agent", "run", "--model", "scripted:json", "--run-id", "j1", "--tools", "Calculator.*",
		"--approve-tools", "Calculator.Add", "What is 2 plus 3?", "-o", "json"); s["runId"] != "j1" {
		t.Fatalf("agent run -o json = %v", s)
	}
	var pending []map[string]any
	waitFor(ctx, t, "the run's call waits for approval", func() bool {
		pending = array("approvals", "list", "-o", "json")
		return len(pending) == 1
	})
	callID, _ := pending[0]["callId"].(string)
	if pending[0]["kind"] != "run" || pending[0]["runId"] != "j1" || !strings.HasPrefix(callID, "j1/") {
		t.Fatalf("approvals list -o json = %v", pending)
	}
	if g := object("agent", "get", "j1", "-o", "json"); g["runId"] != "j1" || g["pendingApprovals"] == nil {
		t.Errorf("agent get -o json (waiting) = %v", g)
	}
	if d := object("agent", "approve", callID, "-o", "json"); d["decision"] != "approved" || d["callId"] != callID || d["runId"] != "j1" {
		t.Errorf("agent approve -o json = %v", d)
	}
	events := jsonLines(t, cli("agent", "watch", "j1", "-o", "json", "--gateway", gw))
	if last := events[len(events)-1]; last["kind"] != "completed" || last["message"] != "2 plus 3 is 5." {
		t.Errorf("agent watch -o json ends with %v", last)
	}
	if !hasField(events, "kind", "approval.requested") || !hasField(events, "kind", "tool_call") {
		t.Errorf("agent watch -o json lacks the approval or the call: %v", events)
	}
	if g := object("agent", "get", "j1", "-o", "yaml"); g["status"] != "RUN_STATUS_COMPLETED" || g["answer"] != "2 plus 3 is 5." {
		t.Errorf("agent get -o yaml = %v", g)
	}
	if runs := array("agent", "list", "-o", "json"); !hasField(runs, "runId", "j1") {
		t.Errorf("agent list -o json = %v", runs)
	}
	if runs := array("agent", "list", "-o", "yaml"); !hasField(runs, "runId", "j1") {
		t.Errorf("agent list -o yaml = %v", runs)
	}
	t.Logf("%s: %s", time.Since(began).Round(time.Millisecond), "agent send")
	// agent send: the follow-up takes a third turn; --watch follows it past
	// the earlier answer and ends at the new one.
	events = jsonLines(t, cli("agent", "send", "j1", "And now?", "--watch", "-o", "json", "--gateway", gw))
	if last := events[len(events)-1]; last["kind"] != "completed" || last["message"] != "no script for turn 3" {
		t.Errorf("agent send --watch -o json ends with %v", last)
	}
	if !hasField(events, "kind", "message") {
		t.Errorf("agent send --watch -o json lacks the message event: %v", events)
	}
	if g := object("agent", "get", "j1", "-o", "json"); g["turns"] != float64(3) {
		t.Errorf("after agent send: turns %v, want 3", g["turns"])
	}
	if r := cli("agent", "send", "j1", "Once more", "-o", "text", "--gateway", gw); r.err != nil || !strings.Contains(r.out, "sent to run j1") {
		t.Errorf("agent send -o text: %v\n%s", r.err, r.out)
	}
	if c := object("agent", "send", "j1", "And again", "-o", "json"); c["change"] != "sent" || c["runId"] != "j1" {
		t.Errorf("agent send -o json = %v", c)
	}
	if c := object("agent", "cancel", "j1", "-o", "json"); c["change"] != "cancelling" || c["runId"] != "j1" {
		t.Errorf("agent cancel -o json = %v", c)
	}
	if r := cli("agent", "send", "no-such-run", "hi", "--gateway", gw); r.err == nil {
		t.Errorf("agent send to no run succeeded:\n%s", r.out)
	}

	t.Logf("%s: %s", time.Since(began).Round(time.Millisecond), "model key")
	// A run whose model key is not set where the orchestrator runs is
	// refused at start, saying which variable to set.
	dir := t.TempDir()
	spec := filepath.Join(dir, "nokey.yaml")
	if err := os.WriteFile(spec, []byte("modelSpec: {provider: openai, name: gpt-4o, keyRef: env:TOOLFLEET_MODEL_KEY_NEVER_SET_IN_TESTS}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = cli("agent", "run", "-f", spec, "--run-id", "nokey", "hi", "--gateway", gw)
	if r.err == nil || !strings.Contains(r.err.Error(), "failed_precondition") ||
		!strings.Contains(r.err.Error(), "needs TOOLFLEET_MODEL_KEY_NEVER_SET_IN_TESTS, which is not set where the orchestrator runs") ||
		!strings.Contains(r.err.Error(), "--model scripted:demo") {
		t.Errorf("agent run without its model key: %v\n%s", r.err, r.out)
	}
	if r := cli("agent", "get", "nokey", "--gateway", gw); r.err == nil {
		t.Errorf("the refused run exists:\n%s", r.out)
	}

	t.Logf("%s: %s", time.Since(began).Round(time.Millisecond), "program")
	// program
	write := func(name, src string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	sum := write("sum.star", "result = {\"sum\": Calculator_Add(a=2, b=3).value[\"result\"]}\n")
	del := write("del.star", "result = KV_Delete(key=\"k\").ok\n")
	if c := object("program", "check", sum, "-o", "json"); c["compiles"] != true || c["resolved"] != true ||
		!hasField(anySlice(c["tools"]), "id", "Calculator.Add@1.0.0") {
		t.Errorf("program check -o json = %v", c)
	}
	if s := array("program", "stubs", "Calculator.Add", "-o", "json"); !hasField(s, "stub", "Calculator_Add") {
		t.Errorf("program stubs -o json = %v", s)
	}
	if res := object("program", "run", sum, "--id", "p1", "-o", "json"); res["sum"] != float64(5) {
		t.Errorf("program run -o json = %v", res)
	}
	if res := object("program", "run", sum, "--id", "p2", "-o", "yaml"); res["sum"] != float64(5) {
		t.Errorf("program run -o yaml = %v", res)
	}
	if res := object("program", "watch", "p1", "-o", "json"); res["sum"] != float64(5) {
		t.Errorf("program watch -o json = %v", res)
	}
	if g := object("program", "get", "p1", "-o", "json"); g["programId"] != "p1" || g["status"] != "PROGRAM_STATUS_COMPLETED" {
		t.Errorf("program get -o json = %v", g)
	}
	if ps := array("program", "list", "-o", "json"); !hasField(ps, "programId", "p1") {
		t.Errorf("program list -o json = %v", ps)
	}
	t.Logf("%s: %s", time.Since(began).Round(time.Millisecond), "program approval")
	// A program whose KV.Delete waits for approval: run gives up waiting
	// (it keeps running), approvals list shows the call, deny decides it.
	if r := cli("program", "run", del, "--id", "p-del", "--timeout", "2s", "-o", "json", "--gateway", gw); r.err == nil {
		t.Fatalf("program run of a call that waits for approval ended:\n%s", r.out)
	}
	waitFor(ctx, t, "the program's call waits for approval", func() bool {
		pending = array("approvals", "list", "-o", "json")
		return hasField(pending, "programId", "p-del")
	})
	callID, _ = pending[0]["callId"].(string)
	if d := object("program", "deny", callID, "--reason", "not now", "-o", "json"); d["decision"] != "denied" || d["programId"] != "p-del" {
		t.Errorf("program deny -o json = %v", d)
	}
	if r := cli("program", "run", del, "--id", "p-cancel", "--timeout", "2s", "--gateway", gw); r.err == nil {
		t.Fatalf("program run of a call that waits for approval ended:\n%s", r.out)
	}
	if c := object("program", "cancel", "p-cancel", "-o", "json"); c["change"] != "cancelling" || c["programId"] != "p-cancel" {
		t.Errorf("program cancel -o json = %v", c)
	}

	t.Logf("%s: %s", time.Since(began).Round(time.Millisecond), "dev token")
	// dev token
	r = cli("dev", "token", "--gateway-jwt-secret", "s3cret", "--sub", "alice", "--scopes", "tools:call", "-o", "json")
	var tok map[string]any
	decode(t, []string{"dev token"}, r.out, &tok)
	if token, _ := tok["token"].(string); r.err != nil || tok["sub"] != "alice" || !strings.HasPrefix(token, "ey") || tok["expiresAt"] == nil {
		t.Errorf("dev token -o json = %v", tok)
	}

	// -o takes the four values and names them otherwise.
	if r := cli("agent", "list", "-o", "xml", "--gateway", gw); r.err == nil || !strings.Contains(r.err.Error(), "want auto, text, json or yaml") {
		t.Errorf("agent list -o xml: %v", r.err)
	}
}

// decode parses out as JSON, or as YAML when args ask for it.
func decode(t *testing.T, args []string, out string, v any) {
	t.Helper()
	var err error
	if strings.Contains(strings.Join(args, " "), "-o yaml") {
		err = yaml.Unmarshal([]byte(out), v)
	} else {
		err = json.Unmarshal([]byte(out), v)
	}
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// jsonLines parses a stream of one JSON object per line.
func jsonLines(t *testing.T, r cliRun) []map[string]any {
	t.Helper()
	if r.err != nil {
		t.Fatalf("%v\n%s%s", r.err, r.out, r.errOut)
	}
	var all []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(r.out), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		all = append(all, m)
	}
	if len(all) == 0 {
		t.Fatal("no lines")
	}
	return all
}

// hasField reports whether one of items has key set to want.
func hasField(items []map[string]any, key string, want any) bool {
	for _, it := range items {
		if it[key] == want {
			return true
		}
	}
	return false
}

// anySlice is v as a list of objects.
func anySlice(v any) []map[string]any {
	var out []map[string]any
	list, _ := v.([]any)
	for _, x := range list {
		if m, ok := x.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}
