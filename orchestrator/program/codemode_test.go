package program_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/encoding/protojson"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/orchestrator/agent"
	"github.com/toolfleet/toolfleet/orchestrator/agent/agenttest"
	"github.com/toolfleet/toolfleet/orchestrator/ids"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/llmtest"
)

// squaresSource is the 10-tool task of code mode: ten calls in one program.
const squaresSource = `
total = 0
for i in range(1, args["n"] + 1):
    total += Calculator_Multiply(a=i, b=i).value["result"]
result = {"sum_of_squares": total}
`

// A code-mode run does the 10-tool task in 2 model turns: the model sees
// run_program and the stubs, the program's calls run as the run's, and only
// the program's result enters the transcript.
func TestCodeModeRun(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	before := s.fleet.Calculator.Multiplies.Load()
	const runID = "code-mode-squares"
	state := s.startRun(t, runID, []string{"Calculator.*"},
		llmtest.ScriptTurn{Check: func(req *llm.Request) error {
			if len(req.Tools) != 1 || req.Tools[0].GetModelName() != agent.RunProgramTool {
				return fmt.Errorf("offered %d tools, want run_program only", len(req.Tools))
			}
			sys := llm.MessageText(req.Messages[0])
			for _, want := range []string{"You are a test.", "Starlark program", "Calculator_Multiply(", "Calculator_Add("} {
				if !strings.Contains(sys, want) {
					return fmt.Errorf("system prompt lacks %q:\n%s", want, sys)
				}
			}
			return nil
		}, Reply: llmtest.CallTools("One program does it.", llm.CallPart("p1", agent.RunProgramTool,
			map[string]any{"source": squaresSource, "args": map[string]any{"n": 10}})).Reply},
		llmtest.ScriptTurn{Check: func(req *llm.Request) error {
			r := lastResult(req)
			if r.GetIsError() || r.GetContent() != `{"sum_of_squares":385}` {
				return fmt.Errorf("program result = %q (error %v)", r.GetContent(), r.GetIsError())
			}
			return nil
		}, Reply: llmtest.SayText("The sum of squares is 385.").Reply},
	)
	if state.Status != agent.StatusCompleted || state.Turn != 2 || state.ToolCalls != 11 || state.Answer != "The sum of squares is 385." {
		t.Errorf("run = %s after %d turns and %d tool calls, answer %q; want COMPLETED, 2, 11 (run_program and its 10)",
			state.Status, state.Turn, state.ToolCalls, state.Answer)
	}
	if n := s.fleet.Calculator.Multiplies.Load() - before; n != 10 {
		t.Errorf("Multiply ran %d times, want 10", n)
	}
	desc, err := s.temporal.DescribeWorkflowExecution(t.Context(), ids.CodeModeProgram(runID, 1, 0), "")
	if err != nil {
		t.Fatalf("the program's child workflow: %v", err)
	}
	if got := desc.GetWorkflowExecutionInfo().GetParentExecution().GetWorkflowId(); got != runID {
		t.Errorf("program's parent = %q, want %q", got, runID)
	}

	// The run's history replays; recorded (TOOLFLEET_RECORD_HISTORIES=1) among
	// the agent's histories, whose TestReplay keeps code mode replayable.
	hist := history(t, s.temporal, runID)
	r := worker.NewWorkflowReplayer()
	r.RegisterWorkflowWithOptions(agent.AgentRunWorkflow, workflow.RegisterOptions{Name: agent.WorkflowName})
	if err := r.ReplayWorkflowHistory(nil, hist); err != nil {
		t.Fatalf("replay: %v", err)
	}
	if os.Getenv("TOOLFLEET_RECORD_HISTORIES") == "1" {
		b, err := protojson.MarshalOptions{Indent: " "}.Marshal(hist)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join("..", "agent", "testdata", "histories", "codemode.json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// A code-mode model's mistakes come back as error results it can act on: a
// call without source, a script that does not compile (with its line and
// column), and a tool called directly instead of from a program.
func TestCodeModeErrors(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	const runID = "code-mode-errors"
	state := s.startRun(t, runID, []string{"Calculator.Add"},
		llmtest.CallTools("", llm.CallPart("p1", agent.RunProgramTool, map[string]any{"args": map[string]any{}}),
			llm.CallPart("p2", agent.RunProgramTool, map[string]any{"source": "x = 1\ny = )\n"}),
			llm.CallPart("p3", "Calculator_Add", map[string]any{"a": 1, "b": 2})),
		llmtest.ScriptTurn{Check: func(req *llm.Request) error {
			results := req.Messages[len(req.Messages)-3:]
			for i, want := range []string{"run_program needs source", ids.CodeModeProgram(runID, 1, 1) + ".star:2:5: ", `no tool named "Calculator_Add"`} {
				r := lastResult(&llm.Request{Messages: results[i : i+1]})
				if !r.GetIsError() || !strings.Contains(r.GetContent(), want) {
					return fmt.Errorf("result %d = %q (error %v), want an error with %q", i, r.GetContent(), r.GetIsError(), want)
				}
			}
			return nil
		}, Reply: llmtest.SayText("I will fix them.").Reply},
	)
	if state.Status != agent.StatusCompleted || state.Turn != 2 {
		t.Errorf("run = %s after %d turns; want COMPLETED after 2 (the model saw the errors)", state.Status, state.Turn)
	}
}

// startRun starts a code-mode run whose model plays turns, and returns its
// state once it has ended.
func (s *stack) startRun(t *testing.T, runID string, tools []string, turns ...llmtest.ScriptTurn) agent.RunState {
	t.Helper()
	s.models.Register(runID, &agenttest.ByTurn{Turns: turns})
	spec := agent.RunSpec{Model: agent.ModelSpec{Spec: llm.Spec{Provider: "scripted", Name: runID}}, Tools: tools,
		CodeMode: true, IdleTimeout: -1}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if _, err := s.runs.Start(ctx, runID, spec, toolcall.Principal{Subject: "ana", Scopes: []string{"tools:call"}},
		llm.System("You are a test."), llm.User("What is the sum of the squares of 1 to 10?")); err != nil {
		t.Fatalf("start %s: %v", runID, err)
	}
	run := s.temporal.GetWorkflow(ctx, runID, "")
	if err := run.Get(ctx, nil); err != nil {
		t.Fatalf("run %s: %v", runID, err)
	}
	st, err := s.runs.Get(ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// lastResult is the tool result of the request's last message.
func lastResult(req *llm.Request) *toolfleetv1.ToolResult {
	for _, p := range req.Messages[len(req.Messages)-1].GetParts() {
		if r := p.GetToolResult(); r != nil {
			return r
		}
	}
	return nil
}
