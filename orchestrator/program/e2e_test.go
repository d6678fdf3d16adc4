package program_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	tclient "go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/toolfleet/toolfleet/e2e"
	"github.com/toolfleet/toolfleet/e2e/programstack"
	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/orchestrator/agent"
	"github.com/toolfleet/toolfleet/orchestrator/program"
	"github.com/toolfleet/toolfleet/orchestrator/runstore"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall"
)

// stack is a real fleet for end-to-end program tests: embedded NATS and
// Temporal, a gateway with the calculator and SchemaTest workers, and a
// Temporal worker running programs.
type stack struct {
	ps       *programstack.Stack
	temporal tclient.Client
	fleet    *e2e.Fleet
	js       jetstream.JetStream
	queue    string
	// runs starts agent runs on the same worker, which runs code-mode
	// programs as child workflows.
	runs   *agent.Runs
	models *agent.Resolver
	// store holds the program values kept out of history (cfg).
	store *runstore.Store
	cfg   program.Config
	// namespace is Temporal's.
	namespace string
}

// startStack starts a stack whose Temporal client keeps program values in the
// blob store as the orchestrator does (program.ExternalStorage), configured by
// cfgs[0] when given.
func startStack(t *testing.T, cfgs ...program.Config) *stack {
	t.Helper()
	return startStackWith(t, e2e.Options{}, cfgs...)
}

// startStackWith starts a stack whose fleet takes opts (its NATS is the
// stack's): the one programstack starts for the tests of programs and of the
// ProgramService.
func startStackWith(t *testing.T, opts e2e.Options, cfgs ...program.Config) *stack {
	t.Helper()
	var cfg program.Config
	if len(cfgs) > 0 {
		cfg = cfgs[0]
	}
	s := programstack.Start(t, opts, cfg)
	return &stack{ps: s, temporal: s.Temporal, fleet: s.Fleet, js: s.JS, queue: s.Queue, models: s.Models, store: s.Store,
		cfg: s.Config, namespace: s.Namespace, runs: s.Runs}
}

func (s *stack) run(t *testing.T, in program.Input) (*program.Output, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute) // a busy CI machine under -race
	defer cancel()
	run, err := s.temporal.ExecuteWorkflow(ctx, tclient.StartWorkflowOptions{ID: in.ProgramID, TaskQueue: s.queue},
		program.WorkflowName, in)
	if err != nil {
		t.Fatal(err)
	}
	var out program.Output
	if err := run.Get(ctx, &out); err != nil {
		if os.Getenv("DEBUG_HISTORY") != "" {
			for _, ev := range history(t, s.temporal, in.ProgramID).GetEvents() {
				t.Logf("%d %s %v", ev.GetEventId(), ev.GetEventType(), ev.GetAttributes())
			}
		}
		return nil, err
	}
	return &out, nil
}

// e2eSource does sequential calls, a loop, a parallel fan-out and handles a
// tool failure, on the real calculator and SchemaTest workers.
const e2eSource = `
first = Calculator_Add(a=1, b=2).value["result"]
total = first
for n in args["numbers"]:
    total = call("Calculator.Add", a=total, b=n).value["result"]
squares = parallel([lambda n=n: Calculator_Multiply(a=n, b=n) for n in args["numbers"]])
failed = Calculator_Divide(a=1, b=0)
print("total", total)
result = {
    "first": first,
    "total": total,
    "squares": [r.value["result"] for r in squares],
    "failure": [failed.ok, failed.error.kind, failed.error.can_retry],
}
`

func TestEndToEnd(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	adds0, muls0 := s.fleet.Calculator.Adds.Load(), s.fleet.Calculator.Multiplies.Load() // the fleet probes with Multiply
	in := program.Input{ProgramID: "e2e-1", Source: e2eSource, ArgsJSON: `{"numbers": [3, 4, 5]}`,
		Tools: []string{"Calculator.*"}}
	out, err := s.run(t, in)
	if err != nil {
		t.Fatalf("program: %v", err)
	}
	const want = `{"first":3,"total":15,"squares":[9,16,25],"failure":[false,"execution",false]}`
	if out.ResultJSON != want || out.ToolCalls != 8 {
		t.Fatalf("result %s with %d calls, want %s with 8", out.ResultJSON, out.ToolCalls, want)
	}
	if adds, muls := s.fleet.Calculator.Adds.Load()-adds0, s.fleet.Calculator.Multiplies.Load()-muls0; adds != 4 || muls != 3 {
		t.Fatalf("the calculator ran %d adds and %d multiplies, want 4 and 3", adds, muls)
	}
	kinds := eventKinds(t, s.js, "e2e-1")
	for _, k := range []string{toolcall.EventStarted, toolcall.EventPrint, toolcall.EventToolCall, toolcall.EventToolResult, "completed"} {
		if kinds[k] == 0 {
			t.Fatalf("no %s event among %v", k, kinds)
		}
	}
	if kinds[toolcall.EventToolCall] != 8 || kinds[toolcall.EventToolResult] != 8 {
		t.Fatalf("events %v, want 8 tool_call and 8 tool_result", kinds)
	}

	// The history replays on the current code; record it for TestReplay with
	// TOOLFLEET_RECORD_HISTORY=1.
	hist := history(t, s.temporal, "e2e-1")
	if err := worker.NewWorkflowReplayer().ReplayWorkflowHistory(nil, hist); err == nil {
		t.Fatal("a replayer without ProgramWorkflow replayed the history: the test cannot tell a replay")
	}
	replayAndRecord(t, s, hist, "program_history.json")
}

func TestEndToEndErrors(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	tests := []struct {
		name, src string
		limits    program.Limits
		want      program.ProgramError
	}{
		{"syntax error", "x = 1\ny = (1 +* 2)\n", program.Limits{},
			program.ProgramError{Kind: "syntax", Position: "loop.star:2:9", Line: "y = (1 +* 2)"}},
		{"tool call limit", "for i in range(5):\n    Calculator_Add(a=i, b=0)\n", program.Limits{MaxToolCalls: 2},
			program.ProgramError{Kind: "limit", Limit: program.LimitToolCalls, Position: "loop.star:2:19", Line: "Calculator_Add(a=i, b=0)"}},
		{"step limit", "n = 0\nfor i in range(1000000):\n    n += i\n", program.Limits{MaxSteps: 5000},
			program.ProgramError{Kind: "limit", Limit: program.LimitSteps, Position: "loop.star:2:1", Line: "for i in range(1000000):"}}, // the loop's jump
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := s.run(t, program.Input{ProgramID: "e2e-err-" + string(rune('a'+i)), Filename: "loop.star",
				Source: tt.src, Limits: tt.limits, Tools: []string{"Calculator.*"}})
			var ae *temporal.ApplicationError
			if !errors.As(err, &ae) || ae.Type() != program.ErrorType {
				t.Fatalf("error %v, want a %s", err, program.ErrorType)
			}
			var pe program.ProgramError
			if err := ae.Details(&pe); err != nil {
				t.Fatal(err)
			}
			if pe.Kind != tt.want.Kind || pe.Limit != tt.want.Limit || !strings.HasPrefix(pe.Position, tt.want.Position) || pe.Line != tt.want.Line {
				t.Fatalf("error %+v, want %+v", pe, tt.want)
			}
		})
	}
}

// TestEndToEndApproval pauses a program on a tool that requires approval
// (SchemaTest.Types) until DecideApproval decides.
func TestEndToEndApproval(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	tests := []struct {
		name     string
		approved bool
		want     string
		runs     int
	}{
		{"granted", true, `[true,"e2e-granted"]`, 1},
		{"denied", false, `[false,"denied by alice: not today"]`, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			id, arg := "approval-"+tt.name, "e2e-"+tt.name
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			run, err := s.temporal.ExecuteWorkflow(ctx, tclient.StartWorkflowOptions{ID: id, TaskQueue: s.queue}, program.WorkflowName,
				program.Input{ProgramID: id, Tools: []string{"SchemaTest.Types"}, ArgsJSON: `{"s": "` + arg + `"}`,
					Source: "r = SchemaTest_Types(s=args['s'])\nresult = [r.ok, r.value['echo']['s'] if r.ok else r.error.message]\n"})
			if err != nil {
				t.Fatal(err)
			}
			// An Update for a call that is not waiting is rejected by the validator
			// (this one also waits for the program to reach the call).
			callID := id + "/1"
			for {
				h, err := s.temporal.UpdateWorkflow(ctx, tclient.UpdateWorkflowOptions{WorkflowID: id, UpdateName: program.UpdateDecideApproval,
					WaitForStage: tclient.WorkflowUpdateStageCompleted, Args: []any{toolcall.Decision{CallID: callID, Approved: tt.approved, Approver: "alice", Reason: "not today"}}})
				if err == nil {
					err = h.Get(ctx, nil)
				}
				if err == nil {
					break
				}
				if !strings.Contains(err.Error(), "waiting for approval") {
					t.Fatalf("DecideApproval: %v", err)
				}
				select {
				case <-ctx.Done():
					t.Fatal("the program never waited for approval")
				case <-time.After(20 * time.Millisecond):
				}
			}
			var out program.Output
			if err := run.Get(ctx, &out); err != nil {
				for _, ev := range history(t, s.temporal, id).GetEvents() {
					t.Logf("%d %s %v", ev.GetEventId(), ev.GetEventType(), ev.GetAttributes())
				}
				t.Fatal(err)
			}
			if out.ResultJSON != tt.want {
				t.Fatalf("result %s, want %s", out.ResultJSON, tt.want)
			}
			if ids := s.fleet.SchemaTest.TypesFor(arg); len(ids) != tt.runs {
				t.Fatalf("SchemaTest.Types ran %d times (%q), want %d", len(ids), ids, tt.runs)
			}
			// The history replays on the current code; TestReplay replays the
			// one recorded (TOOLFLEET_RECORD_HISTORY=1) before the approval
			// step was shared with runs.
			replayAndRecord(t, s, history(t, s.temporal, id), "program_history_"+id+".json")
		})
	}
}

// replayAndRecord replays hist on the current code and, with
// TOOLFLEET_RECORD_HISTORY=1, writes it to testdata/name for TestReplay.
func replayAndRecord(t *testing.T, s *stack, hist *historypb.History, name string) {
	t.Helper()
	if err := replayer(s.store).ReplayWorkflowHistory(nil, hist); err != nil {
		t.Fatalf("replay: %v", err)
	}
	if os.Getenv("TOOLFLEET_RECORD_HISTORY") != "1" {
		return
	}
	b, err := protojson.MarshalOptions{Indent: "  "}.Marshal(hist)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join("testdata", name), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestReplay replays the recorded histories of TestEndToEnd's program (one per
// workflow version): a change to the workflow or the interpreter that would
// break running programs fails here.
func TestReplay(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join("testdata", "program_history*.json"))
	if err != nil || len(files) < 2 {
		t.Fatalf("recorded histories: %q %v", files, err)
	}
	for _, f := range files {
		if err := replayer().ReplayWorkflowHistoryFromJSONFile(nil, f); err != nil {
			t.Errorf("replay of %s: %v", f, err)
		}
	}
}

// replayer replays program histories. Its deadlock detection is off: the
// workers give programs program.DeadlockDetectionTimeout (10 s), the
// replayer's default is 1 s, and a script of 200,000 steps under -race on a
// busy machine takes longer than that without being stuck (what a replay test
// checks is determinism, not speed).
//
// Given a blob store, it reads the program values kept out of history there.
func replayer(blobs ...program.Blobs) worker.WorkflowReplayer {
	opts := worker.WorkflowReplayerOptions{DisableDeadlockDetection: true}
	if len(blobs) > 0 {
		opts.ExternalStorage = program.ExternalStorage(blobs[0], program.Config{})
	}
	r, err := worker.NewWorkflowReplayerWithOptions(opts)
	if err != nil {
		panic(err) // no options that can fail
	}
	program.RegisterWorkflow(r)
	return r
}

func history(t *testing.T, c tclient.Client, id string) *historypb.History {
	t.Helper()
	it := c.GetWorkflowHistory(t.Context(), id, "", false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	h := &historypb.History{}
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		h.Events = append(h.Events, ev)
	}
	return h
}

// eventKinds counts the events of a program in the run event stream.
func eventKinds(t *testing.T, js jetstream.JetStream, id string) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	cons, err := js.OrderedConsumer(ctx, toolcall.DefaultEventStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{toolcall.EventSubjectPrefix + id + ".>"}})
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for range info.NumPending {
		msg, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		ev := &toolfleetv1.RunEvent{}
		if err := protojson.Unmarshal(msg.Data(), ev); err != nil {
			t.Fatal(err)
		}
		kinds[ev.GetKind()]++
	}
	return kinds
}
