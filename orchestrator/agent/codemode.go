package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/orchestrator/ids"
	"github.com/toolfleet/toolfleet/orchestrator/program"
	"github.com/toolfleet/toolfleet/orchestrator/runstore"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall"
	"github.com/toolfleet/toolfleet/sdk/llm"
)

// Code mode: instead of the run's tools, the model is offered one tool,
// run_program, and a system-prompt section listing the tools as Starlark
// stubs. A run_program call runs the script as a child workflow (package
// program's ProgramWorkflow) whose tool calls are the run's; only the
// script's result enters the transcript. The child is started with package
// program's own input and result types and workflow name; program does not
// know about runs (both build on package toolcall).

// Names of code mode.
const (
	// RunProgramTool is the name of the one tool a code-mode run offers.
	RunProgramTool = "run_program"
	// ReadProgramCallActivity reads a run_program call's script and inputs.
	ReadProgramCallActivity = "ReadProgramCall"
	// DefaultProgramDeadline bounds one run_program call (within the run's deadline).
	DefaultProgramDeadline = 10 * time.Minute
)

// ProgramCall is ReadProgramCall's input: call Index of the assistant message at CallSeq.
type ProgramCall struct {
	RunID   string `json:"run_id"`
	Turn    int    `json:"turn"`
	Index   int    `json:"index"`
	CallSeq int    `json:"call_seq"`
}

// ProgramSource is what a run_program call asks to run. Problem, when set,
// says why the call's arguments cannot run (it goes back to the model).
type ProgramSource struct {
	Source   string `json:"source,omitempty"`
	ArgsJSON string `json:"args_json,omitempty"`
	Problem  string `json:"problem,omitempty"`
	// Refused, when set, is why the program may not start: its owner's
	// storage quota or the shared store's reserve (HoldProgram), in the
	// owner's terms. The call fails as a program over that limit does.
	Refused string `json:"refused,omitempty"`
}

// ProgramOutcome is a finished run_program call, appended to the transcript
// by CallTool instead of calling the gateway.
type ProgramOutcome struct {
	// Kind is toolcall.KindOK, KindValidation (bad arguments) or
	// KindExecution (the program failed).
	Kind toolcall.Kind `json:"kind"`
	// Content is the program's result JSON, or the failure's message.
	Content string `json:"content"`
}

// runProgramDefinition is the tool a code-mode model sees.
func runProgramDefinition() *toolfleetv1.ToolDefinition {
	schema, err := structpb.NewStruct(map[string]any{
		"type": "object",
		"properties": map[string]any{
			"source": map[string]any{"type": "string", "description": "The Starlark program. Set a top-level variable result to what it returns."},
			"args":   map[string]any{"type": "object", "description": "Inputs, available to the program as the global args."},
		},
		"required":             []any{"source"},
		"additionalProperties": false,
	})
	if err != nil {
		panic(err) // a literal: cannot fail
	}
	return &toolfleetv1.ToolDefinition{Id: RunProgramTool, Name: RunProgramTool, ModelName: RunProgramTool,
		Description: "Run a Starlark program that calls the tools listed in the system prompt and returns its result. Prefer one program over many separate calls.",
		InputSchema: schema}
}

// withProgramPrompt adds the code-mode section to the first system message
// of a new transcript, or puts a system message first.
func withProgramPrompt(msgs []*toolfleetv1.Message, section string) []*toolfleetv1.Message {
	out := make([]*toolfleetv1.Message, 0, len(msgs)+1)
	if len(msgs) > 0 && msgs[0].GetRole() == toolfleetv1.Role_ROLE_SYSTEM {
		sys := llm.NewMessage(toolfleetv1.Role_ROLE_SYSTEM, append(msgs[0].GetParts(), llm.Text("\n\n"+section))...)
		return append(append(out, sys), msgs[1:]...)
	}
	return append(append(out, llm.NewMessage(toolfleetv1.Role_ROLE_SYSTEM, llm.Text(section))), msgs...)
}

// ReadProgramCall reads the script and inputs of a run_program call and
// announces the call; arguments that cannot run come back as a Problem.
func (a *Activities) ReadProgramCall(ctx context.Context, in ProgramCall) (ProgramSource, error) {
	defer toolcall.Heartbeat(ctx)()
	assistant, err := a.Store.At(ctx, in.RunID, in.CallSeq)
	if err != nil {
		return ProgramSource{}, err
	}
	calls := llm.ToolCalls(assistant)
	if in.Index >= len(calls) {
		return ProgramSource{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("message %d has no call %d", in.CallSeq, in.Index), toolcall.ErrTypeConfig, nil)
	}
	callID := ids.RunCall(in.RunID, in.Turn, in.Index)
	if err := a.Events.Publish(ctx, toolcall.Event{RunID: in.RunID, Kind: toolcall.EventToolCall, Turn: in.Turn, CallID: callID,
		ToolID: RunProgramTool, ID: callID + "/call", Time: time.Now(),
		Message: "program " + ids.CodeModeProgram(in.RunID, in.Turn, in.Index)}); err != nil {
		return ProgramSource{}, err
	}
	fields := calls[in.Index].GetArguments().GetFields()
	var out ProgramSource
	src, ok := fields["source"].GetKind().(*structpb.Value_StringValue)
	switch {
	case !ok || src.StringValue == "":
		out.Problem = "run_program needs source: the Starlark program as a string"
	case len(src.StringValue) > program.MaxSourceBytes:
		out.Problem = fmt.Sprintf("the program is %d bytes; the limit is %d", len(src.StringValue), program.MaxSourceBytes)
	default:
		out.Source = src.StringValue
	}
	if args, ok := fields["args"]; ok && out.Problem == "" {
		if args.GetStructValue() == nil {
			out.Problem = "run_program's args must be an object"
		} else if b, err := protojson.Marshal(args.GetStructValue()); err == nil {
			out.ArgsJSON = string(b)
		} else {
			out.Problem = "run_program's args: " + err.Error()
		}
	}
	if out.Problem == "" {
		refused, err := a.holdChild(ctx, in.RunID, ids.CodeModeProgram(in.RunID, in.Turn, in.Index))
		if err != nil {
			return ProgramSource{}, err
		}
		out.Refused = refused
	}
	return out, nil
}

// holdChild holds a code-mode run's child program as Programs.Start holds
// a top-level one (HoldProgram): the program gets a record naming the run's
// principal, so the values it stores count against that principal's byte
// quota, its calls are checked against it (CheckProgramValues), and the
// reaper frees its values and events once it has been closed for the
// retention. It returns the refusal, in the owner's terms, when the owner is
// over the quota or the shared store has no room for program values.
func (a *Activities) holdChild(ctx context.Context, runID, id string) (refused string, _ error) {
	owner := a.Store.Owner(ctx, runID)
	if owner == "" {
		return "", nil // a run without a record: no quota to count against
	}
	err := a.Store.HoldProgram(ctx, owner, id)
	switch {
	case err == nil:
		return "", nil
	case runstore.Refused(err):
		return err.Error(), nil
	}
	return "", fmt.Errorf("agent: hold program %s: %w", id, err)
}

// runProgram runs a run_program call: read its script, run it as a child
// workflow with the run's tools and principal and what is left of the run's
// budgets, and append the outcome as the call's result.
func (r *run) runProgram(ctx workflow.Context, in CallToolInput) (CallToolResult, error) {
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		HeartbeatTimeout:    toolcall.HeartbeatTimeout,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 10 * time.Second,
			MaximumAttempts: 5, NonRetryableErrorTypes: []string{toolcall.ErrTypeConfig}},
	})
	var src ProgramSource
	if err := workflow.ExecuteActivity(actx, ReadProgramCallActivity,
		ProgramCall{RunID: in.RunID, Turn: in.Turn, Index: in.Index, CallSeq: in.CallSeq}).Get(ctx, &src); err != nil {
		return CallToolResult{}, err
	}
	in.Program = &ProgramOutcome{Kind: toolcall.KindValidation, Content: src.Problem}
	switch {
	case src.Problem != "":
	case src.Refused != "" && workflow.GetVersion(ctx, programHoldChangeID, workflow.DefaultVersion, 1) >= 1:
		// Version 1: a child its owner's quota refuses (ReadProgramCall held
		// it) fails as a program over its storage limit does, without
		// starting. Runs recorded before ReadProgramCall held children
		// never have Refused set.
		in.Program = &ProgramOutcome{Kind: toolcall.KindExecution,
			Content: "The program failed: limit " + program.LimitStorage + ": " + src.Refused}
	default:
		out, err := r.startProgram(ctx, in, src)
		if ctx.Err() != nil { // the run was cancelled or hit its deadline
			return CallToolResult{}, ctx.Err()
		}
		r.st.ToolCalls += out.ToolCalls
		in.Program = &ProgramOutcome{Kind: toolcall.KindOK, Content: out.ResultJSON}
		if err != nil {
			in.Program = &ProgramOutcome{Kind: toolcall.KindExecution, Content: "The program failed: " + programFailure(err)}
			// Version 1: a program that failed still spent the calls it
			// made, against the run's budget (runs recorded before it
			// counted only the calls of programs that completed).
			if workflow.GetVersion(ctx, failedProgramCallsChangeID, workflow.DefaultVersion, 1) >= 1 {
				r.st.ToolCalls += failedProgramCalls(err)
			}
		}
	}
	opts, attempts := toolcall.Options(in.Tool, r.callDefaults)
	in.MaxAttempts = attempts
	var res CallToolResult
	callCtx := workflow.WithActivityOptions(ctx, opts)
	err := toolcall.Await(ctx, workflow.ExecuteActivity(callCtx, CallToolActivity, in), relaunchOn(callCtx), CallToolActivity, in, &res)
	return res, err
}

// startProgram runs the child workflow and waits for its result.
func (r *run) startProgram(ctx workflow.Context, in CallToolInput, src ProgramSource) (program.Output, error) {
	id := ids.CodeModeProgram(r.in.RunID, in.Turn, in.Index)
	deadline := DefaultProgramDeadline
	if left := r.st.StartedAt.Add(orDefault(r.in.Spec.Budget.Deadline, DefaultDeadline)).Sub(workflow.Now(ctx)); left < deadline {
		deadline = left
	}
	tools := make([]string, len(r.tools))
	for i, t := range r.tools {
		tools[i] = t.ID
	}
	// The program obeys the run: its principal, tools, what is left of its
	// budgets, and its approval policy and timeout. Its owner is the run's,
	// so the run's starter can watch it and decide its approvals
	// (ProgramService), and no one else can.
	req := program.Input{ProgramID: id, Filename: id + ".star", Source: src.Source, ArgsJSON: src.ArgsJSON, Tools: tools,
		Approval: r.in.Spec.Approval.Tools, Principal: r.in.Principal,
		Limits: program.Limits{Deadline: deadline, ApprovalWait: orDefault(r.in.Spec.Approval.Timeout, DefaultApprovalTimeout),
			MaxToolCalls: max(1, orDefault(r.in.Spec.Budget.MaxToolCalls, DefaultMaxToolCalls)-r.st.ToolCalls)}}
	cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{WorkflowID: id,
		// The program's own deadline ends it; this only backs it up.
		WorkflowExecutionTimeout: deadline + time.Minute,
		Memo:                     program.OwnerMemo(r.in.Principal.Subject)})
	var out program.Output
	err := workflow.ExecuteChildWorkflow(cctx, program.WorkflowName, req).Get(ctx, &out)
	return out, err
}

// programHoldChangeID versions refusing a child program its owner's quota
// refuses.
const programHoldChangeID = "program-hold"

// failedProgramCallsChangeID versions counting a failed program's calls.
const failedProgramCallsChangeID = "failed-program-calls"

// failedProgramCalls is the number of tool calls a failed child program made
// (its ProgramError's count; 0 when it has none).
func failedProgramCalls(err error) int {
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != program.ErrorType {
		return 0
	}
	var pe program.ProgramError
	if ae.Details(&pe) != nil {
		return 0
	}
	return max(pe.ToolCalls, 0)
}

// programFailure is the message of a failed child program, for the model:
// the program's own error (limit, syntax or runtime error with its line)
// when it has one.
func programFailure(err error) string {
	var term *temporal.TerminatedError
	var canceled *temporal.CanceledError
	switch {
	case errors.As(err, &term):
		return "the program was terminated"
	case errors.As(err, &canceled):
		return "the program was cancelled"
	}
	return toolcall.FailureMessage(err)
}
