package orchestration

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/services/gateway/mcp"
)

// workflowID is the orchestrator's run and program id syntax (orchestrator/ids.Valid).
var workflowID = regexp.MustCompile(`^[A-Za-z0-9_=-]{1,100}$`)

// Task ids are workflow ids: valid as such, unguessable (no two alike), and
// they give back their kind and creation time; anything else is no task.
func TestTaskIDs(t *testing.T) {
	t.Parallel()
	now := time.UnixMilli(1_790_000_000_123)
	seen := map[string]bool{}
	for _, kind := range []string{kindTool, kindProgram, kindRun} {
		for range 1000 {
			id := newTaskID(kind, now)
			if seen[id] {
				t.Fatalf("id %s issued twice", id)
			}
			seen[id] = true
			if !workflowID.MatchString(id) {
				t.Fatalf("%s is not a valid run or program id", id)
			}
			k, created, ok := parseTaskID(id)
			if !ok || k != kind || !created.Equal(now) {
				t.Fatalf("parseTaskID(%s) = %s, %v, %v", id, k, created, ok)
			}
		}
	}
	for _, bad := range []string{"", "mcp-", "mcp-x-1-" + strings.Repeat("A", 26), "mcp-t-1-short", "mcp-t-!!-" + strings.Repeat("A", 26),
		"fd-run", "mcp-t-1-" + strings.Repeat("A", 26) + "-extra", "trg_x"} {
		if _, _, ok := parseTaskID(bad); ok {
			t.Errorf("parseTaskID(%q) accepted a forged id", bad)
		}
	}
}

// A tool call task's program outcome is what CallTool would have answered.
func TestToolOutcome(t *testing.T) {
	t.Parallel()
	done := func(result map[string]any) *toolfleetv1.GetProgramResponse {
		v, err := structpb.NewValue(result)
		if err != nil {
			t.Fatal(err)
		}
		return &toolfleetv1.GetProgramResponse{Status: toolfleetv1.ProgramStatus_PROGRAM_STATUS_COMPLETED, Result: v}
	}
	resp, err := toolOutcome(done(map[string]any{"ok": true, "value": map[string]any{"result": 42.0}}))
	if err != nil || !resp.GetSuccess() || resp.GetValue().GetStructValue().AsMap()["result"] != 42.0 || resp.GetToolId() != "" {
		t.Errorf("ok: %v, %v", resp, err)
	}
	// The tool id the program records names the tool (MCP renders a content
	// result's blocks by it).
	resp, err = toolOutcome(done(map[string]any{"tool": "Conformance.Greet@1.0.0", "ok": true, "value": map[string]any{"result": 42.0}}))
	if err != nil || resp.GetToolId() != "Conformance.Greet@1.0.0" {
		t.Errorf("ok with the tool: %v, %v", resp, err)
	}
	resp, err = toolOutcome(done(map[string]any{"ok": false, "error": map[string]any{"kind": "execution", "message": "boom"}}))
	if err != nil || resp.GetSuccess() || resp.GetError().GetMessage() != "boom" {
		t.Errorf("execution: %v, %v", resp, err)
	}
	_, err = toolOutcome(done(map[string]any{"ok": false, "error": map[string]any{"kind": "validation", "message": "bad", "fields": map[string]any{"a": "must be a number"}}}))
	st, _ := status.FromError(err)
	if st.Code() != codes.InvalidArgument || len(st.Details()) != 1 ||
		st.Details()[0].(*toolfleetv1.ValidationError).GetParameterErrors()["a"] != "must be a number" {
		t.Errorf("validation: %v", err)
	}
	if _, err = toolOutcome(done(map[string]any{"ok": false, "error": map[string]any{"kind": "denied", "message": "no"}})); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("denied: %v", err)
	}
	// An orchestrator older than one-call programs runs an empty script.
	if _, err = toolOutcome(&toolfleetv1.GetProgramResponse{Status: toolfleetv1.ProgramStatus_PROGRAM_STATUS_COMPLETED}); status.Code(err) != codes.Internal {
		t.Errorf("no outcome: %v", err)
	}
	failed := &toolfleetv1.GetProgramResponse{Status: toolfleetv1.ProgramStatus_PROGRAM_STATUS_FAILED, ProgramError: &toolfleetv1.ProgramError{Kind: "tools", Message: "no tool matches"}}
	if _, err = toolOutcome(failed); status.Code(err) != codes.PermissionDenied {
		t.Errorf("tools: %v", err)
	}
}

// Listed states map onto MCP statuses by the one table tasks/get uses: a
// failed (or terminated, timed-out) run or program is a completed task whose
// result says it failed.
func TestSummaryState(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		words []string
		want  mcp.TaskStatus
	}{
		{[]string{"", "Running"}, mcp.TaskWorking},
		{[]string{"waiting_approval", "Running"}, mcp.TaskInputRequired},
		{[]string{"completed", "Completed"}, mcp.TaskCompleted},
		{[]string{"failed", ""}, mcp.TaskCompleted},
		{[]string{"canceled", "Canceled"}, mcp.TaskCancelled},
		{[]string{"Terminated"}, mcp.TaskCompleted},
		{[]string{"TimedOut"}, mcp.TaskCompleted},
		{[]string{"ContinuedAsNew"}, mcp.TaskWorking},
	} {
		if got := summaryState("id", tc.words...).Status; got != tc.want {
			t.Errorf("%q: %s, want %s", tc.words, got, tc.want)
		}
	}
	// Every status the services name maps as tasks/get maps it.
	for name, v := range toolfleetv1.ProgramStatus_value {
		x := strings.TrimPrefix(name, "PROGRAM_STATUS_")
		if got, want := summaryState("id", strings.ToLower(x)).Status, taskStatus(toolfleetv1.ProgramStatus(v).String(), "PROGRAM_STATUS_"); got != want {
			t.Errorf("%s: listed %s, got %s", name, got, want)
		}
	}
}

// fakePrograms answers GetProgram with what it was asked, or panics.
type fakePrograms struct {
	Programs
	panics bool
}

func (f fakePrograms) GetProgram(_ context.Context, r *connect.Request[toolfleetv1.GetProgramRequest]) (*connect.Response[toolfleetv1.GetProgramResponse], error) {
	if f.panics {
		panic("boom")
	}
	if r.Header().Get("Authorization") != "Bearer t" {
		return nil, connect.NewError(connect.CodeUnauthenticated, errors.New("no token"))
	}
	return connect.NewResponse(&toolfleetv1.GetProgramResponse{ProgramId: r.Msg.GetProgramId()}), nil
}

// A call reaches the service with the MCP caller's token, as its Connect
// handler would: errors keep their codes, a panic is INTERNAL, a service
// not there yet answers its getter's error.
func TestCall(t *testing.T) {
	t.Parallel()
	ctx := mcp.WithAuthorization(t.Context(), "Bearer t")
	get := func(p Programs, err error) func() (Programs, error) {
		return func() (Programs, error) { return p, err }
	}
	req := &toolfleetv1.GetProgramRequest{ProgramId: "p1"}
	if resp, err := call(ctx, get(fakePrograms{}, nil), req, Programs.GetProgram); err != nil || resp.GetProgramId() != "p1" {
		t.Errorf("call: %v, %v", resp, err)
	}
	if _, err := call(t.Context(), get(fakePrograms{}, nil), req, Programs.GetProgram); status.Code(err) != codes.Unauthenticated {
		t.Errorf("without a token: %v, want UNAUTHENTICATED", err)
	}
	if _, err := call(ctx, get(fakePrograms{panics: true}, nil), req, Programs.GetProgram); status.Code(err) != codes.Internal {
		t.Errorf("a panic: %v, want INTERNAL", err)
	}
	starting := status.Error(codes.Unavailable, "the orchestrator is starting")
	if _, err := call(ctx, get(nil, starting), req, Programs.GetProgram); status.Code(err) != codes.Unavailable {
		t.Errorf("not there: %v, want UNAVAILABLE", err)
	}
	refused := connect.NewError(connect.CodeFailedPrecondition, errors.New("not configured"))
	if _, err := call(ctx, get(nil, refused), req, Programs.GetProgram); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("not configured: %v, want FAILED_PRECONDITION", err)
	}
}

// TestTaskStatus: every run and program status maps to the task status it
// had before the one table; a status added to either enum fails here until
// it is placed.
func TestTaskStatus(t *testing.T) {
	t.Parallel()
	runs := map[toolfleetv1.RunStatus]mcp.TaskStatus{
		toolfleetv1.RunStatus_RUN_STATUS_UNSPECIFIED:      mcp.TaskWorking,
		toolfleetv1.RunStatus_RUN_STATUS_RUNNING:          mcp.TaskWorking,
		toolfleetv1.RunStatus_RUN_STATUS_WAITING_APPROVAL: mcp.TaskInputRequired,
		toolfleetv1.RunStatus_RUN_STATUS_COMPLETED:        mcp.TaskCompleted,
		toolfleetv1.RunStatus_RUN_STATUS_FAILED:           mcp.TaskCompleted,
		toolfleetv1.RunStatus_RUN_STATUS_CANCELED:         mcp.TaskCancelled,
		toolfleetv1.RunStatus_RUN_STATUS_BUDGET_EXHAUSTED: mcp.TaskCompleted,
		toolfleetv1.RunStatus_RUN_STATUS_WAITING_INPUT:    mcp.TaskInputRequired,
	}
	checkStatuses(t, toolfleetv1.RunStatus_name, runs, func(rs toolfleetv1.RunStatus) mcp.TaskStatus {
		st := &mcp.TaskState{}
		runState(st, &toolfleetv1.GetRunResponse{Status: rs})
		return st.Status
	})
	programs := map[toolfleetv1.ProgramStatus]mcp.TaskStatus{
		toolfleetv1.ProgramStatus_PROGRAM_STATUS_UNSPECIFIED:      mcp.TaskWorking,
		toolfleetv1.ProgramStatus_PROGRAM_STATUS_RUNNING:          mcp.TaskWorking,
		toolfleetv1.ProgramStatus_PROGRAM_STATUS_WAITING_APPROVAL: mcp.TaskInputRequired,
		toolfleetv1.ProgramStatus_PROGRAM_STATUS_COMPLETED:        mcp.TaskCompleted,
		toolfleetv1.ProgramStatus_PROGRAM_STATUS_FAILED:           mcp.TaskCompleted,
		toolfleetv1.ProgramStatus_PROGRAM_STATUS_CANCELED:         mcp.TaskCancelled,
		toolfleetv1.ProgramStatus_PROGRAM_STATUS_WAITING_INPUT:    mcp.TaskInputRequired,
	}
	checkStatuses(t, toolfleetv1.ProgramStatus_name, programs, func(ps toolfleetv1.ProgramStatus) mcp.TaskStatus {
		st := &mcp.TaskState{}
		programState(st, kindProgram, &toolfleetv1.GetProgramResponse{Status: ps})
		return st.Status
	})
}

// checkStatuses checks the task status of every value of an enum (its
// generated name map) against want.
func checkStatuses[S ~int32](t *testing.T, names map[int32]string, want map[S]mcp.TaskStatus, taskStatus func(S) mcp.TaskStatus) {
	t.Helper()
	for v, name := range names {
		w, ok := want[S(v)]
		if !ok {
			t.Errorf("%s: no expected task status", name)
		}
		if got := taskStatus(S(v)); got != w {
			t.Errorf("%s: task %q, want %q", name, got, w)
		}
	}
}

// startRecorder records the programs and runs a task starts.
type startRecorder struct {
	Programs
	Agents
	programs []*toolfleetv1.RunProgramRequest
	runs     []*toolfleetv1.StartRunRequest
}

func (s *startRecorder) RunProgram(_ context.Context, r *connect.Request[toolfleetv1.RunProgramRequest]) (*connect.Response[toolfleetv1.RunProgramResponse], error) {
	s.programs = append(s.programs, r.Msg)
	return connect.NewResponse(&toolfleetv1.RunProgramResponse{ProgramId: r.Msg.GetProgramId()}), nil
}

func (s *startRecorder) StartRun(_ context.Context, r *connect.Request[toolfleetv1.StartRunRequest]) (*connect.Response[toolfleetv1.StartRunResponse], error) {
	s.runs = append(s.runs, r.Msg)
	return connect.NewResponse(&toolfleetv1.StartRunResponse{RunId: r.Msg.GetRunId()}), nil
}

// A task's tools ask its people only when the MCP client can answer
// (TaskStart.AskPeople); a tool call task carries the first round answered
// inline to its program's call.
func TestStartTaskQuestions(t *testing.T) {
	t.Parallel()
	rec := &startRecorder{}
	b := New(Services{Programs: func() (Programs, error) { return rec, nil }, Agents: func() (Agents, error) { return rec, nil }})
	ctx := mcp.WithAuthorization(t.Context(), "Bearer t")
	answer, _ := structpb.NewStruct(map[string]any{"action": "accept", "content": map[string]any{"name": "Ada"}})
	starts := []mcp.TaskStart{
		{Kind: mcp.TaskToolCall, ToolID: "T.Asks", Input: &structpb.Struct{}, AskPeople: true,
			Answers: map[string]*structpb.Struct{"user_name": answer}, RequestState: "tfs1.s"},
		{Kind: mcp.TaskToolCall, ToolID: "T.Asks", Input: &structpb.Struct{}},
		{Kind: mcp.TaskProgram, Input: &structpb.Struct{Fields: map[string]*structpb.Value{"source": structpb.NewStringValue("result = 1")}}, AskPeople: true},
		{Kind: mcp.TaskAgentRun, Input: &structpb.Struct{}},
	}
	for _, st := range starts {
		if _, err := b.StartTask(ctx, st); err != nil {
			t.Fatal(err)
		}
	}
	ask, decline := toolfleetv1.QuestionPolicy_QUESTION_POLICY_ASK, toolfleetv1.QuestionPolicy_QUESTION_POLICY_DECLINE
	if len(rec.programs) != 3 || len(rec.runs) != 1 {
		t.Fatalf("started %d programs and %d runs, want 3 and 1", len(rec.programs), len(rec.runs))
	}
	first := rec.programs[0]
	if first.GetQuestions() != ask || first.GetToolCall().GetRequestState() != "tfs1.s" ||
		first.GetToolCall().GetInputResponses()["user_name"].AsMap()["action"] != "accept" {
		t.Errorf("tool call task of a client that answers: %v", first)
	}
	if got := []toolfleetv1.QuestionPolicy{rec.programs[1].GetQuestions(), rec.programs[2].GetQuestions(), rec.runs[0].GetQuestions()}; got[0] != decline || got[1] != ask || got[2] != decline {
		t.Errorf("question policies %v, want decline (no elicitation), ask, decline", got)
	}
}
