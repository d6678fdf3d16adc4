// Package orchestration runs MCP tasks (package mcp, docs/mcp.md "Tasks")
// on the orchestrator's Temporal workflows, through its ProgramService and
// AgentService: the [Services] given to [New] when the gateway serves /mcp,
// called with the MCP request's credentials so that the services' own scopes
// and ownership apply (another caller's task is NOT_FOUND). Nothing is kept
// here: a task id names its workflow.
//
//   - a long tool call is a program whose spec names the one call
//     (RunProgramRequest.tool_call, no script): the program workflow calls
//     the tool as a durable activity, with its approval gate;
//   - toolfleet_run_program is a program, toolfleet_run_agent an agent run.
//
// A task id is "mcp-<kind>-<created, ms base 36>-<130 random bits>": t a
// tool call, p a program, r a run. It is the workflow id.
package orchestration

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/services/gateway/mcp"
)

// Task id kinds.
const (
	taskIDPrefix = "mcp-"
	kindTool     = "t"
	kindProgram  = "p"
	kindRun      = "r"
)

// Programs is what MCP tasks call of the ProgramService. The service itself
// (programapi.Service, in process) and its generated Connect client
// (toolfleetv1connect.ProgramServiceClient, an orchestrator elsewhere) both
// have these methods.
type Programs interface {
	RunProgram(context.Context, *connect.Request[toolfleetv1.RunProgramRequest]) (*connect.Response[toolfleetv1.RunProgramResponse], error)
	GetProgram(context.Context, *connect.Request[toolfleetv1.GetProgramRequest]) (*connect.Response[toolfleetv1.GetProgramResponse], error)
	CancelProgram(context.Context, *connect.Request[toolfleetv1.CancelProgramRequest]) (*connect.Response[toolfleetv1.CancelProgramResponse], error)
	DecideProgramApproval(context.Context, *connect.Request[toolfleetv1.DecideProgramApprovalRequest]) (*connect.Response[toolfleetv1.DecideProgramApprovalResponse], error)
	AnswerProgramInput(context.Context, *connect.Request[toolfleetv1.AnswerProgramInputRequest]) (*connect.Response[toolfleetv1.AnswerProgramInputResponse], error)
	ListPrograms(context.Context, *connect.Request[toolfleetv1.ListProgramsRequest]) (*connect.Response[toolfleetv1.ListProgramsResponse], error)
}

// Agents is what MCP tasks call of the AgentService (agentapi.Service in
// process, or toolfleetv1connect.AgentServiceClient).
type Agents interface {
	StartRun(context.Context, *connect.Request[toolfleetv1.StartRunRequest]) (*connect.Response[toolfleetv1.StartRunResponse], error)
	GetRun(context.Context, *connect.Request[toolfleetv1.GetRunRequest]) (*connect.Response[toolfleetv1.GetRunResponse], error)
	CancelRun(context.Context, *connect.Request[toolfleetv1.CancelRunRequest]) (*connect.Response[toolfleetv1.CancelRunResponse], error)
	DecideApproval(context.Context, *connect.Request[toolfleetv1.DecideApprovalRequest]) (*connect.Response[toolfleetv1.DecideApprovalResponse], error)
	AnswerInput(context.Context, *connect.Request[toolfleetv1.AnswerInputRequest]) (*connect.Response[toolfleetv1.AnswerInputResponse], error)
	ListRuns(context.Context, *connect.Request[toolfleetv1.ListRunsRequest]) (*connect.Response[toolfleetv1.ListRunsResponse], error)
}

// Services are the orchestrator's services MCP tasks run on, both required.
// Each returns the service to call now, or the error (a Connect or gRPC
// status) every task call answers meanwhile: UNAVAILABLE while the
// orchestrator starts (the gateway starts first), FAILED_PRECONDITION when
// the gateway has none configured.
type Services struct {
	Programs func() (Programs, error)
	Agents   func() (Agents, error)
	// Connections, optional, makes the links of the connect items tasks/get
	// shows (connect.go); nil: those items only say how to connect.
	Connections Connections
}

// Tasks runs MCP tasks on [Services]; it implements mcp.Tasks and
// mcp.ConnectLinker.
type Tasks struct {
	s     Services
	links *linkCache
}

var (
	_ mcp.Tasks         = (*Tasks)(nil)
	_ mcp.ConnectLinker = (*Tasks)(nil)
)

// New returns MCP tasks run on s.
func New(s Services) *Tasks { return &Tasks{s: s, links: newLinkCache()} }

// call calls method of the service get returns with msg, as its Connect
// handler would have been called: with the MCP caller's Authorization, a
// panic answered INTERNAL (and logged), errors as gRPC statuses.
func call[S, Req, Resp any](ctx context.Context, get func() (S, error), msg *Req,
	method func(S, context.Context, *connect.Request[Req]) (*connect.Response[Resp], error)) (resp *Resp, err error) {
	s, err := get()
	if err != nil {
		return nil, statusOf(err)
	}
	defer func() {
		if v := recover(); v != nil {
			slog.ErrorContext(ctx, "recovered a panic in an MCP task call", "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			resp, err = nil, status.Error(codes.Internal, "internal error")
		}
	}()
	r := connect.NewRequest(msg)
	if a := mcp.Authorization(ctx); a != "" {
		r.Header().Set("Authorization", a)
	}
	out, err := method(s, ctx, r)
	if err != nil {
		return nil, statusOf(err)
	}
	return out.Msg, nil
}

// newTaskID is a fresh, unguessable task id of kind.
func newTaskID(kind string, now time.Time) string {
	var r [16]byte
	_, _ = rand.Read(r[:]) // never fails (crypto/rand)
	enc := base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(r[:])
	return taskIDPrefix + kind + "-" + strconv.FormatInt(now.UnixMilli(), 36) + "-" + enc
}

// parseTaskID returns the kind and creation time of a task id, or ok false.
func parseTaskID(id string) (kind string, created time.Time, ok bool) {
	rest, found := strings.CutPrefix(id, taskIDPrefix)
	if !found {
		return "", time.Time{}, false
	}
	parts := strings.Split(rest, "-")
	if len(parts) != 3 || len(parts[2]) != 26 {
		return "", time.Time{}, false
	}
	ms, err := strconv.ParseInt(parts[1], 36, 64)
	if err != nil {
		return "", time.Time{}, false
	}
	switch parts[0] {
	case kindTool, kindProgram, kindRun:
		return parts[0], time.UnixMilli(ms), true
	}
	return "", time.Time{}, false
}

// IsTaskID reports whether a program or run id is an MCP task's (the
// console labels them so in the inbox).
func IsTaskID(id string) bool {
	_, _, ok := parseTaskID(id)
	return ok
}

var errNoTask = status.Error(codes.NotFound, "no such task")

// StartTask starts the task's workflow; the answer comes once Temporal
// recorded the start.
func (b *Tasks) StartTask(ctx context.Context, start mcp.TaskStart) (*mcp.TaskState, error) {
	now := time.Now()
	switch start.Kind {
	case mcp.TaskToolCall:
		id := newTaskID(kindTool, now)
		if _, err := call(ctx, b.s.Programs, &toolfleetv1.RunProgramRequest{ProgramId: id, Questions: questionPolicy(start),
			ToolCall: &toolfleetv1.ProgramToolCall{ToolId: start.ToolID, Input: start.Input,
				InputResponses: start.Answers, RequestState: start.RequestState}}, Programs.RunProgram); err != nil {
			return nil, err
		}
		return &mcp.TaskState{ID: id, Kind: start.Kind, Status: mcp.TaskWorking, CreatedAt: now, UpdatedAt: now}, nil
	case mcp.TaskProgram:
		in := start.Input.AsMap()
		id := newTaskID(kindProgram, now)
		req := &toolfleetv1.RunProgramRequest{ProgramId: id, Source: str(in["source"]), Tools: strs(in["tools"]), Filename: "mcp-task.star",
			Questions: questionPolicy(start)}
		if a, ok := in["args"].(map[string]any); ok {
			args, err := structpb.NewStruct(a)
			if err != nil {
				return nil, status.Error(codes.InvalidArgument, "args are not JSON")
			}
			req.Args = args
		}
		resp, err := call(ctx, b.s.Programs, req, Programs.RunProgram)
		if err != nil {
			return nil, err
		}
		if pe := resp.GetProgramError(); pe != nil { // a syntax error: found before anything ran
			return nil, status.Error(codes.InvalidArgument, programErrorText(pe))
		}
		return &mcp.TaskState{ID: id, Kind: start.Kind, Status: mcp.TaskWorking, CreatedAt: now, UpdatedAt: now}, nil
	case mcp.TaskAgentRun:
		in := start.Input.AsMap()
		id := newTaskID(kindRun, now)
		req := &toolfleetv1.StartRunRequest{RunId: id, Model: str(in["model"]), SystemPrompt: str(in["system_prompt"]),
			Tools: strs(in["tools"]), IdleTimeout: durationpb.New(-time.Second), // close once answered
			Questions: questionPolicy(start),
			Messages: []*toolfleetv1.Message{{Role: toolfleetv1.Role_ROLE_USER,
				Parts: []*toolfleetv1.Part{{Kind: &toolfleetv1.Part_Text{Text: str(in["prompt"])}}}}}}
		if n, ok := in["max_turns"].(float64); ok && n > 0 && n < 1e6 {
			req.Budget = &toolfleetv1.Budget{MaxTurns: int32(n)}
		}
		if _, err := call(ctx, b.s.Agents, req, Agents.StartRun); err != nil {
			return nil, err
		}
		return &mcp.TaskState{ID: id, Kind: start.Kind, Status: mcp.TaskWorking, CreatedAt: now, UpdatedAt: now}, nil
	}
	return nil, status.Error(codes.InvalidArgument, "unknown task kind")
}

// GetTask reads the task's workflow (as its owner: another caller's is NOT_FOUND).
func (b *Tasks) GetTask(ctx context.Context, id string) (*mcp.TaskState, error) {
	kind, created, ok := parseTaskID(id)
	if !ok {
		return nil, errNoTask
	}
	st := &mcp.TaskState{ID: id, CreatedAt: created}
	if kind == kindRun {
		resp, err := call(ctx, b.s.Agents, &toolfleetv1.GetRunRequest{RunId: id}, Agents.GetRun)
		if err != nil {
			return nil, err
		}
		runState(st, resp)
		return st, nil
	}
	resp, err := call(ctx, b.s.Programs, &toolfleetv1.GetProgramRequest{ProgramId: id}, Programs.GetProgram)
	if err != nil {
		return nil, statusOf(err)
	}
	programState(st, kind, resp)
	return st, nil
}

// taskStatuses is the one mapping of a run's and a program's status to
// their task's. RunStatus and ProgramStatus name their values alike
// (RUN_STATUS_X, PROGRAM_STATUS_X), so it is keyed by X; a status it does not
// name (running, unspecified) is working. A failed run or program is a
// completed task whose response says it failed.
var taskStatuses = map[string]mcp.TaskStatus{
	"WAITING_APPROVAL": mcp.TaskInputRequired,
	"WAITING_INPUT":    mcp.TaskInputRequired,
	"CANCELED":         mcp.TaskCancelled,
	"COMPLETED":        mcp.TaskCompleted,
	"FAILED":           mcp.TaskCompleted,
	"BUDGET_EXHAUSTED": mcp.TaskCompleted,
}

// taskStatus is the task status of a run's or program's status, named
// prefix + X.
func taskStatus(name, prefix string) mcp.TaskStatus {
	if ts, ok := taskStatuses[strings.TrimPrefix(name, prefix)]; ok {
		return ts
	}
	return mcp.TaskWorking
}

// approvals are a run's or program's pending approvals as a task's.
func approvals(pending []*toolfleetv1.PendingApproval) []mcp.TaskApproval {
	var out []mcp.TaskApproval
	for _, p := range pending {
		out = append(out, mcp.TaskApproval{CallID: p.GetCallId(), ToolID: p.GetToolId(), Arguments: p.GetArguments()})
	}
	return out
}

// runState fills st from a run.
func runState(st *mcp.TaskState, r *toolfleetv1.GetRunResponse) {
	st.Kind = mcp.TaskAgentRun
	st.Status = taskStatus(r.GetStatus().String(), "RUN_STATUS_")
	switch st.Status {
	case mcp.TaskInputRequired:
		st.Message = "a tool call of the run waits for approval"
		st.Approvals = approvals(r.GetPendingApprovals())
		if st.Questions = questions(r.GetPendingQuestions()); len(st.Questions) > 0 {
			st.Message = "a tool of the run asks for input"
		}
	case mcp.TaskCompleted:
		if r.GetStatus() == toolfleetv1.RunStatus_RUN_STATUS_COMPLETED {
			v, _ := structpb.NewValue(map[string]any{"runId": r.GetRunId(), "answer": r.GetAnswer(),
				"turns": float64(r.GetTurns()), "toolCalls": float64(r.GetToolCalls())})
			st.Response = &toolfleetv1.CallToolResponse{Success: true, ToolId: mcp.RunAgentID, Outcome: &toolfleetv1.CallToolResponse_Value{Value: v}}
			return
		}
		msg := "the run failed: " + r.GetFailureMessage()
		if b := r.GetBudget(); b != "" {
			msg = "the run's budget ran out: " + b
		}
		st.Response = &toolfleetv1.CallToolResponse{ToolId: mcp.RunAgentID, Outcome: &toolfleetv1.CallToolResponse_Error{Error: &toolfleetv1.ToolError{Message: msg}}}
	case mcp.TaskWorking:
		st.Message = fmt.Sprintf("turn %d, %d tool calls", r.GetTurns(), r.GetToolCalls())
	}
}

// programState fills st from a program (a tool call task's or a program task's).
func programState(st *mcp.TaskState, kind string, p *toolfleetv1.GetProgramResponse) {
	st.Kind = mcp.TaskProgram
	if kind == kindTool {
		st.Kind = mcp.TaskToolCall
	}
	st.Status = taskStatus(p.GetStatus().String(), "PROGRAM_STATUS_")
	switch st.Status {
	case mcp.TaskInputRequired:
		st.Message = "a tool call waits for approval"
		st.Approvals = approvals(p.GetPendingApprovals())
		if st.Questions = questions(p.GetPendingQuestions()); len(st.Questions) > 0 {
			st.Message = "a tool asks for input"
		}
	case mcp.TaskCompleted:
		if kind == kindTool {
			st.Response, st.Err = toolOutcome(p)
			return
		}
		if pe := p.GetProgramError(); pe != nil || p.GetStatus() == toolfleetv1.ProgramStatus_PROGRAM_STATUS_FAILED {
			st.Response = &toolfleetv1.CallToolResponse{ToolId: mcp.RunProgramID, Outcome: &toolfleetv1.CallToolResponse_Error{
				Error: &toolfleetv1.ToolError{Message: "the program failed: " + programErrorText(pe)}}}
			return
		}
		v, _ := structpb.NewValue(map[string]any{"programId": p.GetProgramId(), "result": p.GetResult().AsInterface(),
			"toolCalls": float64(p.GetToolCalls())})
		st.Response = &toolfleetv1.CallToolResponse{Success: true, ToolId: mcp.RunProgramID, Outcome: &toolfleetv1.CallToolResponse_Value{Value: v}}
	}
}

// toolOutcome is the outcome of a tool call task's program, as CallTool
// would have answered: a value, an execution error, or a refusal. Tasks of
// both forms have the same result: one-call programs (RunProgramRequest.
// tool_call) and, started before them, a one-tool script.
func toolOutcome(p *toolfleetv1.GetProgramResponse) (*toolfleetv1.CallToolResponse, error) {
	if pe := p.GetProgramError(); pe != nil || p.GetStatus() == toolfleetv1.ProgramStatus_PROGRAM_STATUS_FAILED {
		code := codes.Internal
		if pe.GetKind() == "tools" { // the tool is unknown to this caller or may not be called
			code = codes.PermissionDenied
		}
		return nil, status.Error(code, programErrorText(pe))
	}
	out, _ := p.GetResult().AsInterface().(map[string]any)
	if _, isOutcome := out["ok"]; !isOutcome {
		// A worker older than RunProgramRequest.tool_call ran an empty script.
		return nil, status.Error(codes.Internal, "the orchestrator's workers do not know one-call programs: upgrade them to this gateway's version")
	}
	if ok, _ := out["ok"].(bool); ok {
		v, err := structpb.NewValue(out["value"])
		if err != nil {
			return nil, status.Error(codes.Internal, "the tool's result is not JSON")
		}
		// The tool's id (tasks started before it was recorded have none):
		// the MCP server renders a content result's blocks by it.
		tool, _ := out["tool"].(string)
		return &toolfleetv1.CallToolResponse{Success: true, ToolId: tool, Outcome: &toolfleetv1.CallToolResponse_Value{Value: v}}, nil
	}
	e, _ := out["error"].(map[string]any)
	msg, _ := e["message"].(string)
	switch e["kind"] {
	case "execution":
		return &toolfleetv1.CallToolResponse{Outcome: &toolfleetv1.CallToolResponse_Error{Error: &toolfleetv1.ToolError{Message: msg}}}, nil
	case "validation":
		ve := &toolfleetv1.ValidationError{Message: msg, ParameterErrors: map[string]string{}}
		if f, ok := e["fields"].(map[string]any); ok {
			for k, v := range f {
				ve.ParameterErrors[k] = fmt.Sprint(v)
			}
		}
		st, err := status.New(codes.InvalidArgument, msg).WithDetails(ve)
		if err != nil {
			return nil, status.Error(codes.InvalidArgument, msg)
		}
		return nil, st.Err()
	case "denied":
		return nil, status.Error(codes.FailedPrecondition, "the call was not approved: "+msg)
	}
	return nil, status.Error(codes.Unavailable, msg) // "server": the gateway refused the call
}

// programErrorText is one line saying why a program failed.
func programErrorText(pe *toolfleetv1.ProgramError) string {
	if pe == nil {
		return "the program failed"
	}
	s := pe.GetKind() + ": " + pe.GetMessage()
	if pe.GetPosition() != "" {
		s += " (at " + pe.GetPosition() + ")"
	}
	return s
}

// CancelTask cancels the task's workflow.
func (b *Tasks) CancelTask(ctx context.Context, id string) error {
	kind, _, ok := parseTaskID(id)
	if !ok {
		return errNoTask
	}
	var err error
	if kind == kindRun {
		_, err = call(ctx, b.s.Agents, &toolfleetv1.CancelRunRequest{RunId: id}, Agents.CancelRun)
	} else {
		_, err = call(ctx, b.s.Programs, &toolfleetv1.CancelProgramRequest{ProgramId: id}, Programs.CancelProgram)
	}
	return err
}

// DecideTask answers an approval the task's workflow waits for.
func (b *Tasks) DecideTask(ctx context.Context, id, callID string, approved bool, reason string) error {
	kind, _, ok := parseTaskID(id)
	if !ok {
		return errNoTask
	}
	var err error
	if kind == kindRun {
		_, err = call(ctx, b.s.Agents, &toolfleetv1.DecideApprovalRequest{RunId: id, CallId: callID, Approved: approved, Reason: reason}, Agents.DecideApproval)
	} else {
		_, err = call(ctx, b.s.Programs, &toolfleetv1.DecideProgramApprovalRequest{ProgramId: id, CallId: callID, Approved: approved, Reason: reason}, Programs.DecideProgramApproval)
	}
	return err
}

// taskCursor is where a listing goes on: programs first, then runs.
type taskCursor struct {
	Runs  bool   `json:"r,omitempty"`
	Token []byte `json:"t,omitempty"`
}

// maxListScans bounds the service pages one tasks/list reads.
const maxListScans = 8

// ListTasks lists the caller's tasks (the services list the caller's own
// programs and runs; an admin scope lists everyone's), each read in full so
// that the listing says what tasks/get would.
func (b *Tasks) ListTasks(ctx context.Context, cursor string, size int) ([]*mcp.TaskState, string, error) {
	var c taskCursor
	if cursor != "" {
		raw, err := base64.RawURLEncoding.DecodeString(cursor)
		if err != nil || json.Unmarshal(raw, &c) != nil {
			return nil, "", status.Error(codes.InvalidArgument, "invalid cursor")
		}
	}
	var ids []string
	listed := map[string]*mcp.TaskState{} // from the listing, for a task that cannot be read now
	done := false
	for scan := 0; scan < maxListScans && len(ids) < size && !done; scan++ {
		want := int32(size - len(ids))
		var page []string
		var next []byte
		if c.Runs {
			resp, err := call(ctx, b.s.Agents, &toolfleetv1.ListRunsRequest{PageSize: want, PageToken: c.Token}, Agents.ListRuns)
			if err != nil {
				return nil, "", err
			}
			for _, r := range resp.GetRuns() {
				page = append(page, r.GetRunId())
				listed[r.GetRunId()] = summaryState(r.GetRunId(), r.GetState())
			}
			next = resp.GetNextPageToken()
		} else {
			resp, err := call(ctx, b.s.Programs, &toolfleetv1.ListProgramsRequest{PageSize: want, PageToken: c.Token}, Programs.ListPrograms)
			if err != nil {
				return nil, "", err
			}
			for _, p := range resp.GetPrograms() {
				page = append(page, p.GetProgramId())
				listed[p.GetProgramId()] = summaryState(p.GetProgramId(), p.GetStatus(), p.GetState())
			}
			next = resp.GetNextPageToken()
		}
		for _, id := range page {
			if _, _, ok := parseTaskID(id); ok {
				ids = append(ids, id)
			}
		}
		switch {
		case len(next) > 0:
			c.Token = next
		case !c.Runs:
			c = taskCursor{Runs: true}
		default:
			done = true
		}
	}
	out := make([]*mcp.TaskState, 0, len(ids))
	for _, id := range ids {
		st, err := b.GetTask(ctx, id)
		switch {
		case status.Code(err) == codes.NotFound:
			continue // gone since it was listed
		case err != nil:
			if ctx.Err() != nil {
				return nil, "", status.Error(codes.DeadlineExceeded, "the listing took too long")
			}
			st = listed[id] // not readable now (e.g. its query timed out): what the listing says
		}
		out = append(out, st)
	}
	if done {
		return out, "", nil
	}
	raw, _ := json.Marshal(c)
	return out, base64.RawURLEncoding.EncodeToString(raw), nil
}

// summaryState is a task as a listing describes it, for a task that cannot
// be read in full now: the first of its status words (a program's status,
// Temporal's state) that the one status table (taskStatuses) says is not
// working, as tasks/get would say it.
func summaryState(id string, words ...string) *mcp.TaskState {
	_, created, _ := parseTaskID(id)
	st := &mcp.TaskState{ID: id, CreatedAt: created, Status: mcp.TaskWorking}
	for _, w := range words {
		if ts := taskStatus(listedStatus(w), ""); ts != mcp.TaskWorking {
			st.Status = ts
			break
		}
	}
	return st
}

// listedStatuses name Temporal's states as the status enums do (X of
// RUN_STATUS_X) where the words differ: a workflow ended without a result
// failed.
var listedStatuses = map[string]string{"CANCELLED": "CANCELED", "TERMINATED": "FAILED", "TIMEDOUT": "FAILED", "TIMED_OUT": "FAILED"}

// listedStatus is a listing's status word ("waiting_approval", "Completed",
// "TimedOut") as the status enums name it.
func listedStatus(word string) string {
	w := strings.ToUpper(strings.TrimSpace(word))
	if s, ok := listedStatuses[w]; ok {
		return s
	}
	return w
}

// statusOf turns a service's error (a Connect error, or already a gRPC
// status) into a gRPC status error with the same code and message.
func statusOf(err error) error {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return status.Error(codes.Code(ce.Code()), ce.Message())
	}
	if st, ok := status.FromError(err); ok && st.Code() != codes.Unknown {
		return err
	}
	return status.Error(codes.Unavailable, "the task service did not answer")
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

func strs(v any) []string {
	l, _ := v.([]any)
	out := make([]string, 0, len(l))
	for _, e := range l {
		if s, ok := e.(string); ok {
			out = append(out, s)
		}
	}
	return out
}
