package program_test

import (
	"context"
	"strings"
	"testing"
	"time"

	tclient "go.temporal.io/sdk/client"

	"github.com/toolfleet/toolfleet/orchestrator/program"
)

// TestCancelBusyProgram: CancelProgram stops a busy program within a bound —
// one that keeps calling a slow tool, one that computes within its step
// budget — while another tenant's program, running beside it, completes.
func TestCancelBusyProgram(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	programs := &program.Programs{Temporal: s.temporal, TaskQueue: s.queue}
	start := func(ctx context.Context, in program.Input) {
		t.Helper()
		if _, err := s.temporal.ExecuteWorkflow(ctx, tclient.StartWorkflowOptions{ID: in.ProgramID, TaskQueue: s.queue},
			program.WorkflowName, in); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name, src string
		lim       program.Limits
		steps     uint64 // busy: this many steps, else 3 tool calls
	}{
		// About a minute of 50 ms calls.
		{"tool calls", "for i in range(1000):\n    SchemaTest_Sleep(duration='0.05s')\n",
			program.Limits{MaxToolCalls: 1000}, 0},
		// Compute between calls, within the step budget: each round is a
		// tool call and ~10k steps.
		{"compute", "x = 0\nfor i in range(1000):\n    Calculator_Add(a=i, b=1)\n    for j in range(3000):\n        x += j\n",
			program.Limits{MaxToolCalls: 1000, MaxSteps: program.MaxSteps}, 0},
		// Compute only, no tool call: 10 M steps take seconds (tens of them
		// under -race). The program gives its workflow task back every 1 M
		// steps: before, a query waited for the whole computation, and a
		// cancel too (then the program failed on max_steps).
		{"spin", "x = 0\nfor i in range(100000000):\n    x += 1\n",
			program.Limits{MaxSteps: program.MaxSteps}, 1 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			busy := "cancel-busy-" + tc.name[:4]
			other := "cancel-other-" + tc.name[:4]
			start(ctx, program.Input{ProgramID: busy,
				Tools: []string{"SchemaTest.Sleep", "Calculator.Add"}, Source: tc.src, Limits: tc.lim})
			// Busy for a while: a few calls made.
			for {
				st, err := programs.Get(ctx, busy)
				if err != nil && strings.Contains(err.Error(), "deadline exceeded") && ctx.Err() == nil {
					// The server gave up on one query while the machine
					// was loaded (the worker answers between workflow
					// tasks); ask again until the subtest's deadline.
					t.Logf("query: %v", err)
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				if st.Status != program.StatusRunning {
					t.Fatalf("the busy program ended early: %+v", st)
				}
				if st.State != nil && (tc.steps == 0 && st.State.ToolCalls >= 3 || tc.steps > 0 && st.State.Steps >= tc.steps) {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			start(ctx, program.Input{ProgramID: other,
				Tools: []string{"Calculator.Add"}, Source: "result = [Calculator_Add(a=i, b=1).value['result'] for i in range(5)]\n"})
			if err := programs.Cancel(ctx, busy); err != nil {
				t.Fatal(err)
			}
			asked := time.Now()
			wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
			defer wcancel()
			st, err := programs.Wait(wctx, busy)
			if err != nil {
				t.Fatalf("the busy program did not end within 10 s of CancelProgram: %v", err)
			}
			if st.Status != program.StatusCanceled {
				t.Fatalf("the busy program ended %+v, want canceled", st)
			}
			t.Logf("cancelled in %v", time.Since(asked))
			o, err := programs.Wait(ctx, other)
			if err != nil || o.Status != program.StatusCompleted || o.Output.ResultJSON != "[1,2,3,4,5]" {
				t.Fatalf("the other tenant's program: %+v, %v; want completed [1,2,3,4,5]", o, err)
			}
		})
	}
}
