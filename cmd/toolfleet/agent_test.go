package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/internal/devstack/devstacktest"
	"github.com/toolfleet/toolfleet/orchestrator/agent"
	"github.com/toolfleet/toolfleet/orchestrator/agent/agenttest"
	"github.com/toolfleet/toolfleet/orchestrator/metrics"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/llmtest"
)

// TestAgentCLI runs the gateway with the AgentService mounted (as `toolfleet
// dev` wires it) and the orchestrator, then drives a run with the CLI: run
// --watch prints plain lines when piped, get and list find the run.
func TestAgentCLI(t *testing.T) {
	t.Parallel()
	stack := devstacktest.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	agents := &agentMount{}
	models := agent.NewResolver()
	// Each reply reports usage, as a provider would, so the watch's running total can be checked.
	withUsage := func(turn llmtest.ScriptTurn, in, out int64) llmtest.ScriptTurn {
		turn.Reply.Usage = &toolfleetv1.Usage{InputTokens: in, OutputTokens: out}
		return turn
	}
	models.Register("cli", &agenttest.ByTurn{Turns: []llmtest.ScriptTurn{
		withUsage(llmtest.CallTools("Multiplying.", llm.CallPart("c1", "Calculator_Multiply", map[string]any{"a": 6, "b": 7})), 100, 10),
		withUsage(llmtest.SayText("6 times 7 is 42."), 130, 7),
	}})
	om := metrics.New()
	f, o := startWith(ctx, t, stack, models, false, om, agents.mount(), metricsMount(om))
	agents.serve(o, f.Gateway)

	run := func(args ...string) (string, error) {
		var out bytes.Buffer
		root := newRootCommand()
		root.SetArgs(append(args, "--gateway", f.Gateway.Addr()))
		root.SetOut(&out)
		root.SetErr(&out)
		err := root.ExecuteContext(ctx)
		return out.String(), err
	}
	out, err := run("agent", "run", "--model", "scripted:cli", "--run-id", "cli-run", "--tools", "Calculator.*", "What is 6 times 7?", "--watch")
	if err != nil {
		t.Fatalf("agent run: %v\n%s", err, out)
	}
	for _, want := range []string{"▶ run cli-run", "turn 1: 1 tool call; Multiplying.", "→ Calculator.Multiply", "← ok in", `{"result":42}`,
		"turn 2: 0 tool calls; 6 times 7 is 42.", "✓ 6 times 7 is 42. (2 turns, 1 tool call,", "; run so far "} {
		if !strings.Contains(out, want) {
			t.Errorf("watch output lacks %q:\n%s", want, out)
		}
	}
	// The running total after the last turn is the run's usage that GetRun reports.
	var in, outTok int64
	if _, err := fmt.Sscanf(out[strings.Index(out, "(2 turns, 1 tool call, "):], "(2 turns, 1 tool call, %d tokens in / %d out", &in, &outTok); err != nil || in == 0 {
		t.Fatalf("final usage: %v (in=%d)\n%s", err, in, out)
	}
	if in != 230 || outTok != 17 {
		t.Errorf("final usage %d in / %d out, want 230 / 17", in, outTok)
	}
	if want := fmt.Sprintf("[130 in / 7 out; run so far %d / %d tokens]", in, outTok); !strings.Contains(out, want) {
		t.Errorf("watch output lacks the running total %q:\n%s", want, out)
	}
	if strings.Contains(out, "\x1b[") {
		t.Errorf("piped output has escape codes:\n%q", out)
	}
	if out, err := run("agent", "get", "cli-run"); err != nil || !strings.Contains(out, `"RUN_STATUS_COMPLETED"`) {
		t.Fatalf("agent get: %v\n%s", err, out)
	}
	if out, err := run("agent", "get", "cli-run", "-o", "text"); err != nil {
		t.Fatalf("agent get -o text: %v\n%s", err, out)
	} else {
		for _, want := range []string{"Run:", "cli-run", "Status:", "completed", "Turns:", "Tool calls:", "230 tokens in / 17 out",
			"Pending approvals: none", "Answer:\n  6 times 7 is 42."} {
			if !strings.Contains(out, want) {
				t.Errorf("agent get -o text lacks %q:\n%s", want, out)
			}
		}
	}
	// Piped, list prints one JSON array; -o text a table with a header row.
	out, err = run("agent", "list")
	var runs []map[string]any
	if err != nil || json.Unmarshal([]byte(out), &runs) != nil || len(runs) == 0 || runs[0]["runId"] == nil {
		t.Fatalf("agent list (JSON): %v\n%s", err, out)
	}
	if out, err := run("agent", "list", "-o", "text"); err != nil || !tableHas(out, []string{"RUN ID", "STATUS", "MODEL", "STARTED", "ENDED"}, "cli-run") ||
		!strings.Contains(grepLines(out, "cli-run "), " completed ") {
		t.Fatalf("agent list -o text: %v, want a header row and cli-run completed (as agent get says)\n%s", err, out)
	}
	if out, err := run("agent", "list", "-o", "table"); err == nil || !strings.Contains(err.Error(), "want auto, text, json or yaml") {
		t.Errorf("agent list -o table: %v, want the choices named\n%s", err, out)
	}
	// The built-in demo model needs no key: the run a new user starts first
	// goes through the real gateway and the bundled workers to completion.
	out, err = run("agent", "run", "--model", "scripted:demo", "--run-id", "demo-run", "add 2 and 3", "--watch")
	if err != nil {
		t.Fatalf("agent run scripted:demo: %v\n%s", err, out)
	}
	for _, want := range []string{"▶ run demo-run", "→ Calculator.Add", `{"result":5}`, "→ KV.Put", "→ KV.Get", "✓ "} {
		if !strings.Contains(out, want) {
			t.Errorf("demo watch output lacks %q:\n%s", want, out)
		}
	}
	if out, err := run("agent", "get", "demo-run"); err != nil || !strings.Contains(out, `"RUN_STATUS_COMPLETED"`) {
		t.Fatalf("agent get demo-run: %v\n%s", err, out)
	}
	// Code mode: the same task as one program, in 2 turns instead of 4.
	out, err = run("agent", "run", "--code-mode", "--run-id", "code-run", "add 2 and 3 and save it as lucky", "--watch")
	if err != nil {
		t.Fatalf("agent run --code-mode: %v\n%s", err, out)
	}
	for _, want := range []string{"→ run_program", "2 + 3 = 5. A jq query agrees. Saved under \"lucky\"", "and read back as 5", "(5 tool calls in one program.)",
		"(2 turns, 6 tool calls"} {
		if !strings.Contains(out, want) {
			t.Errorf("code-mode watch output lacks %q:\n%s", want, out)
		}
	}
	if out, err := run("agent", "approve", "cli-run/1/0"); err == nil {
		t.Fatalf("approving a call that waits for nothing succeeded:\n%s", out)
	}
	// The orchestrator's metrics, as the dev gateway serves them: three runs
	// ended, the scripted model's tokens, one program and its five calls.
	resp, err := http.Get("http://" + f.Gateway.Addr() + OrchestratorMetricsPath)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`toolfleet_agent_runs_finished_total{status="COMPLETED"} 3`,
		`toolfleet_agent_model_tokens_total{direction="input",model="cli",provider="scripted"} 230`,
		`toolfleet_agent_model_tokens_total{direction="output",model="cli",provider="scripted"} 17`,
		`toolfleet_agent_tool_calls_total{outcome="ok"} `,
		`toolfleet_program_runs_finished_total{status="COMPLETED"} 1`,
		`toolfleet_program_tool_calls_total{outcome="ok"} 5`,
		`toolfleet_agent_model_turn_seconds_count{provider="scripted"} `,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("%s lacks %q:\n%s", OrchestratorMetricsPath, want, grepLines(string(body), "toolfleet_"))
		}
	}
}

// tableHas reports whether out is a table whose first line is header and
// one of whose rows starts with first.
func tableHas(out string, header []string, first string) bool {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 2 || strings.Join(strings.Fields(lines[0]), " ") != strings.Join(header, " ") {
		return false
	}
	for _, l := range lines[1:] {
		if f := strings.Fields(l); len(f) > 0 && f[0] == first {
			return true
		}
	}
	return false
}

// grepLines keeps the lines of s that start with prefix.
func grepLines(s, prefix string) string {
	var keep []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}
