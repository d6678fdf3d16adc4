package program_test

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/orchestrator/program"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall"
)

// oneToolScript is the script MCP tasks ran a long tool call with before the
// typed spec (Input.Call); programs started so still run it.
const oneToolScript = `r = call(args["tool"], **args["input"])
result = {"tool": args["tool"], "ok": r.ok, "value": r.value, "error": None if r.ok else {"kind": r.error.kind, "message": r.error.message, "fields": r.error.fields}}
`

// A program that is one tool call computes what the script computed, for
// every kind of outcome: a value, a tool's failure, an input the contract
// refuses, a denied approval.
func TestToolCallProgram(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, tool, input string
		deny              bool
		want              map[string]any
	}{
		{name: "value", tool: "Calculator.Add", input: `{"a": 2, "b": 3}`,
			want: map[string]any{"tool": "Calculator.Add", "ok": true, "value": map[string]any{"result": 5.0}, "error": nil}},
		{name: "execution", tool: "Calculator.Fail", input: `{}`,
			want: map[string]any{"tool": "Calculator.Fail", "ok": false, "value": nil,
				"error": map[string]any{"kind": "execution", "message": "cannot do that", "fields": map[string]any{}}}},
		{name: "validation", tool: "Calculator.Add", input: `{"a": "two"}`},
		{name: "denied", tool: "Bank.Transfer", input: `{"amount": 5}`, deny: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			run := func(in program.Input) map[string]any {
				e := newEnv(t)
				if tt.deny {
					e.RegisterDelayedCallback(func() {
						e.UpdateWorkflow(program.UpdateDecideApproval, "u1", &updateResult{err: new(error)},
							toolcall.Decision{CallID: "p1/1", Approver: "bob", Reason: "no"})
					}, time.Minute)
				}
				in.Tools = []string{tt.tool}
				out, perr := e.run(t, in)
				if perr != nil {
					t.Fatalf("program failed: %v", perr)
				}
				var got map[string]any
				if err := json.Unmarshal([]byte(out.ResultJSON), &got); err != nil {
					t.Fatal(err)
				}
				if out.ToolCalls != 1 && got["error"] == nil {
					t.Errorf("tool calls %d, want 1", out.ToolCalls)
				}
				return got
			}
			var input map[string]any
			if err := json.Unmarshal([]byte(tt.input), &input); err != nil {
				t.Fatal(err)
			}
			args, _ := json.Marshal(map[string]any{"tool": tt.tool, "input": input})
			script := run(program.Input{Source: oneToolScript, ArgsJSON: string(args)})
			typed := run(program.Input{Call: &program.ToolCall{ToolID: tt.tool, InputJSON: tt.input}})
			if !reflect.DeepEqual(typed, script) {
				t.Errorf("typed call:\n%v\nthe script:\n%v", typed, script)
			}
			if tt.want != nil && !reflect.DeepEqual(typed, tt.want) {
				t.Errorf("typed call:\n%v\nwant\n%v", typed, tt.want)
			}
			if e, _ := typed["error"].(map[string]any); tt.want == nil && (typed["ok"] != false || e["kind"] == nil) {
				t.Errorf("typed call: %v, want a failed call", typed)
			}
		})
	}
}

// A one-call program may call only its tool.
func TestToolCallProgramOtherTool(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, perr := e.run(t, program.Input{Tools: []string{"Calculator.Add"}, Call: &program.ToolCall{ToolID: "Calculator.Fail"}})
	if perr == nil || perr.Kind != "tools" {
		t.Fatalf("program error %v, want kind tools", perr)
	}
}
