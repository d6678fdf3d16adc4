package program_test

import (
	"errors"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/toolfleet/toolfleet/orchestrator/program"
)

// TestEndToEndBombs runs the memory bomb of issue 21 and a parallel() CPU
// bomb on the embedded stack (real Temporal, gateway and workers): each ends
// within seconds as a limit error, its history replays to the same verdict
// (the budgets are counted, not measured), and a normal program completes on
// the same worker afterwards. It also checks that Programs.Start gives a
// program its execution timeout.
func TestEndToEndBombs(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	bombs := []struct {
		id, src, limit string
		limits         program.Limits
	}{
		// With a 64 MiB budget the bomb ends at its first step ("x" * (1 << 27)
		// is 128 MiB); TestMemoryBombAllocates runs it with the default budget.
		{"bomb-memory", `result = len("".join(["x" * (1 << 27)] * 64))`, program.LimitMemory, program.Limits{MaxMemoryBytes: 64 << 20}},
		{"bomb-parallel", `
def spin():
    x = 0
    for i in range(100000):
        x += i
    return Calculator_Add(a=x, b=1)
parallel([spin for _ in range(300)])
`, program.LimitSteps, program.Limits{MaxSteps: 200_000, MaxToolCalls: 1000}},
	}
	for _, b := range bombs {
		start := time.Now()
		_, err := s.run(t, program.Input{ProgramID: b.id, Source: b.src, Tools: []string{"Calculator.*"}, Limits: b.limits})
		var ae *temporal.ApplicationError
		var pe program.ProgramError
		if !errors.As(err, &ae) || ae.Details(&pe) != nil || pe.Kind != "limit" || pe.Limit != b.limit {
			t.Fatalf("%s: %v (%+v), want a %s limit", b.id, err, pe, b.limit)
		}
		took := time.Since(start)
		t.Logf("%s ended in %s: %s", b.id, took.Round(time.Millisecond), pe.Message)
		if took > 30*time.Second {
			t.Errorf("%s took %s, want seconds", b.id, took)
		}
		if err := replayer(s.store).ReplayWorkflowHistory(nil, history(t, s.temporal, b.id)); err != nil {
			t.Fatalf("%s: the history does not replay to the same verdict: %v", b.id, err)
		}
	}

	// A normal program still completes, started the way the service does.
	programs := &program.Programs{Temporal: s.temporal, TaskQueue: s.queue}
	id, err := programs.Start(t.Context(), program.Input{ProgramID: "after-bombs", Source: e2eSource,
		ArgsJSON: `{"numbers": [1, 2]}`, Tools: []string{"Calculator.*"}, Limits: program.Limits{Deadline: 2 * time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	desc, err := s.temporal.DescribeWorkflowExecution(t.Context(), id, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := desc.GetExecutionConfig().GetWorkflowExecutionTimeout().AsDuration(); got != 3*time.Minute {
		t.Fatalf("execution timeout %s, want the deadline plus a minute (3m)", got)
	}
	var out program.Output
	if err := s.temporal.GetWorkflow(t.Context(), id, "").Get(t.Context(), &out); err != nil {
		t.Fatalf("a normal program after the bombs: %v", err)
	}
	if out.ResultJSON != `{"first":3,"total":6,"squares":[1,4],"failure":[false,"execution",false]}` {
		t.Fatalf("result %s", out.ResultJSON)
	}
}
