package agent

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/toolfleet/toolfleet/orchestrator/ids"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall"
	"github.com/toolfleet/toolfleet/orchestrator/visibility"
)

// modelTurnTimeout bounds one model turn.
const modelTurnTimeout = 10 * time.Minute

// legacyCallDefaults are the call options of runs recorded before
// toolcall.Standard (change "toolcall-options"): 2 minutes without a contract
// timeout, the contract's plus 30 s with one, 1–30 s backoff.
var legacyCallDefaults = toolcall.Defaults{Timeout: 90 * time.Second, Margin: 30 * time.Second, Attempts: 3,
	InitialBackoff: time.Second, MaxBackoff: 30 * time.Second}

// resumeChangeID versions carrying a completed run's counters into the
// execution SendMessage starts (RunInput.Resume).
const resumeChangeID = "resume-completed-run"

// deliverInboxChangeID versions answering a message that arrived during the
// last turn of a run that closes on its answer.
const deliverInboxChangeID = "deliver-inbox"

// endRun ends a run with a status other than a failure of the workflow.
type endRun struct {
	status, reason string
}

func (e *endRun) Error() string { return e.status + ": " + e.reason }

// run is one execution's state. Workflow code: no I/O, no map ranging, time
// from workflow.Now.
type run struct {
	in        RunInput
	st        RunState
	tools     []toolcall.Tool
	toolsRef  string
	failures  []Failure
	inbox     []string
	gate      *toolcall.Gate
	desk      *toolcall.Desk
	execTurns int
	deadline  bool
	// callDefaults are the call options' defaults (toolcall.Standard, or
	// legacyCallDefaults when replaying a run recorded before it).
	callDefaults toolcall.Defaults
	// seen keeps the search attributes in step (orchestrator/visibility).
	seen *visibility.Tracker
}

// AgentRunWorkflow is one durable agent run: model turn → tool calls → tool
// results → next turn, until the model answers (then it waits IdleTimeout
// for SendMessage), a budget is spent, or the run is cancelled. Only
// references and summaries pass through its history; the transcript is in
// the [Store].
func AgentRunWorkflow(ctx workflow.Context, in RunInput) (RunState, error) {
	r := &run{in: in, gate: toolcall.NewGate(), desk: toolcall.NewDesk(), st: RunState{RunID: in.RunID, Status: StatusRunning},
		callDefaults: toolcall.Standard, seen: visibility.NewTracker(ctx, visibility.KindRun, in.Visibility)}
	if workflow.GetVersion(ctx, toolcall.OptionsChangeID, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		r.callDefaults = legacyCallDefaults
	}
	if err := r.register(ctx); err != nil {
		return r.st, err
	}
	return r.execute(ctx)
}

// register installs GetRun, DecideApproval and SendMessage.
func (r *run) register(ctx workflow.Context) error {
	if err := workflow.SetQueryHandler(ctx, QueryGetRun, func() (RunState, error) {
		s := r.st
		s.Pending = r.gate.Pending()
		s.Questions = r.desk.Pending()
		return s, nil
	}); err != nil {
		return err
	}
	if err := r.gate.Register(ctx, UpdateDecideApproval); err != nil {
		return err
	}
	if err := r.desk.Register(ctx, UpdateAnswerInput); err != nil {
		return err
	}
	return workflow.SetUpdateHandlerWithOptions(ctx, UpdateSendMessage,
		func(_ workflow.Context, m SendMessageInput) error {
			// The sender's current scopes hold from now on: for the calls
			// still to be made in this turn and every turn after, and for
			// the executions it continues as (RunInput.Principal).
			if m.Principal != nil {
				r.in.Principal.Scopes = slices.Clone(m.Principal.Scopes)
			}
			r.inbox = append(r.inbox, m.Ref)
			return nil
		},
		workflow.UpdateHandlerOptions{Validator: func(m SendMessageInput) error {
			if m.Ref == "" {
				return errors.New("no message")
			}
			if m.Principal != nil && m.Principal.Subject != r.in.Principal.Subject {
				return errors.New("the message names another principal than the run's")
			}
			switch r.st.Status {
			case StatusFailed, StatusCanceled:
				return fmt.Errorf("the run is %s", r.st.Status)
			}
			return nil
		}})
}

func (r *run) execute(ctx workflow.Context) (RunState, error) {
	spec := r.in.Spec
	if c := r.in.Carry; c != nil {
		r.st.Seq, r.st.Turn, r.st.ToolCalls, r.st.Usage, r.st.StartedAt = c.Seq, c.Turn, c.ToolCalls, c.Usage, c.StartedAt
		r.tools, r.toolsRef, r.failures, r.inbox = c.Tools, c.ToolsRef, c.Failures, c.Inbox
	} else {
		r.st.StartedAt = workflow.Now(ctx)
		actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			StartToCloseTimeout: time.Minute,
			HeartbeatTimeout:    toolcall.HeartbeatTimeout, // a dead worker's attempt is retried after this
			RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2,
				MaximumInterval: 30 * time.Second, MaximumAttempts: 5, NonRetryableErrorTypes: []string{toolcall.ErrTypeConfig}},
		})
		var prep PrepareResult
		err := workflow.ExecuteActivity(actx, PrepareRunActivity, PrepareInput{RunID: r.in.RunID, Spec: spec,
			Principal: r.in.Principal, InputRef: r.in.InputRef}).Get(ctx, &prep)
		if err != nil {
			return r.finish(ctx, err)
		}
		r.tools, r.toolsRef, r.st.Seq, r.st.Turn = prep.Tools, prep.ToolsRef, prep.Seq, prep.Turn
		// A completed run started again by SendMessage keeps its counters
		// and its start time: budgets and deadline go on, never restart.
		if rs := r.in.Resume; rs != nil && workflow.GetVersion(ctx, resumeChangeID, workflow.DefaultVersion, 1) >= 1 {
			r.st.ToolCalls, r.st.Usage, r.st.StartedAt = rs.ToolCalls, rs.Usage, rs.StartedAt
		}
		started := fmt.Sprintf("%d tools", len(r.tools))
		if spec.CodeMode {
			started += ", code mode"
		}
		r.publish(ctx, toolcall.EventStarted, 0, "", "", started,
			r.in.RunID+"/started/"+workflow.GetInfo(ctx).WorkflowExecution.RunID)
	}

	// The deadline cancels whatever the loop waits on.
	lctx, cancel := workflow.WithCancel(ctx)
	left := r.st.StartedAt.Add(orDefault(spec.Budget.Deadline, DefaultDeadline)).Sub(workflow.Now(ctx))
	if left <= 0 {
		return r.finish(ctx, &endRun{StatusBudgetExhausted, "deadline"})
	}
	workflow.Go(lctx, func(gctx workflow.Context) {
		if workflow.NewTimer(gctx, left).Get(gctx, nil) == nil {
			r.deadline = true
			cancel()
		}
	})

	for {
		if err := r.drainInbox(lctx); err != nil {
			return r.finish(ctx, err)
		}
		if end := r.turnBudget(); end != nil {
			return r.finish(ctx, end)
		}
		if r.continueAsNew(ctx) {
			if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
				return r.finish(ctx, err)
			}
			return r.st, workflow.NewContinueAsNewError(ctx, WorkflowName, r.next())
		}
		res, err := r.modelTurn(lctx)
		if err != nil {
			return r.finish(ctx, err)
		}
		if len(res.Calls) == 0 {
			if done, err := r.answered(ctx, lctx, res); done || err != nil {
				return r.st, err
			}
			continue
		}
		if err := r.runCalls(lctx, res); err != nil {
			return r.finish(ctx, err)
		}
	}
}

// answered records the model's answer and waits for SendMessage; done is
// true when the idle time passed (or the run was stopped) without one.
func (r *run) answered(ctx, lctx workflow.Context, res ModelTurnResult) (done bool, err error) {
	r.st.Status, r.st.Answer, r.st.AnswerSHA256, r.st.AnswerBytes = StatusCompleted, res.Preview, res.TextSHA256, res.TextBytes
	r.publish(ctx, toolcall.EventCompleted, r.st.Turn, "", "", res.Text(), fmt.Sprintf("%s/completed/%d", r.in.RunID, r.st.Turn))
	idle := orDefault(r.in.Spec.IdleTimeout, DefaultIdleTimeout)
	if idle < 0 {
		// A message accepted during the last turn is answered, never
		// acknowledged and dropped (version 1; before, the run closed).
		if len(r.inbox) > 0 && workflow.GetVersion(ctx, deliverInboxChangeID, workflow.DefaultVersion, 1) >= 1 {
			r.st.Status = StatusRunning
			return false, nil
		}
		return true, nil
	}
	r.st.Idle = true
	got, err := workflow.AwaitWithTimeout(lctx, idle, func() bool { return len(r.inbox) > 0 })
	r.st.Idle = false
	if err != nil || !got {
		if ctx.Err() != nil { // CancelRun while idle
			_, cerr := r.finish(ctx, err)
			return true, cerr
		}
		return true, nil // idle time or deadline: the run stays completed
	}
	r.st.Status = StatusRunning
	return false, nil
}

// relaunchOn is the context a lost call is scheduled on again: the same
// options as its first launch.
func relaunchOn(actx workflow.Context) func() workflow.Context {
	return func() workflow.Context { return actx }
}

// drainInbox appends messages sent with SendMessage.
func (r *run) drainInbox(ctx workflow.Context) error {
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		HeartbeatTimeout:    toolcall.HeartbeatTimeout,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 10 * time.Second, MaximumAttempts: 5},
	})
	for len(r.inbox) > 0 {
		ref := r.inbox[0]
		var n int
		if err := workflow.ExecuteActivity(actx, AppendInputActivity, AppendInput{RunID: r.in.RunID, Seq: r.st.Seq, Ref: ref}).Get(ctx, &n); err != nil {
			return err
		}
		r.inbox = r.inbox[1:]
		r.st.Seq += n
		r.publish(ctx, toolcall.EventMessage, r.st.Turn, "", "", "", fmt.Sprintf("%s/message/%d", r.in.RunID, r.st.Seq))
	}
	return nil
}

// turnBudget names the budget that forbids another turn, if any.
func (r *run) turnBudget() *endRun {
	b := r.in.Spec.Budget
	switch {
	case r.st.Turn >= orDefault(b.MaxTurns, DefaultMaxTurns):
		return &endRun{StatusBudgetExhausted, "max_turns"}
	case b.MaxInputTokens > 0 && r.st.Usage.InputTokens >= b.MaxInputTokens:
		return &endRun{StatusBudgetExhausted, "max_input_tokens"}
	case b.MaxOutputTokens > 0 && r.st.Usage.OutputTokens >= b.MaxOutputTokens:
		return &endRun{StatusBudgetExhausted, "max_output_tokens"}
	}
	return nil
}

func (r *run) continueAsNew(ctx workflow.Context) bool {
	if n := r.in.Spec.ContinueEveryTurns; n > 0 && r.execTurns >= n {
		return true
	}
	return workflow.GetInfo(ctx).GetContinueAsNewSuggested()
}

// next is the input of the execution that continues this one: references
// and counters only.
func (r *run) next() RunInput {
	return RunInput{RunID: r.in.RunID, Spec: r.in.Spec, Principal: r.in.Principal, Visibility: r.in.Visibility,
		HistoryContent: r.in.HistoryContent, Carry: &Carry{
			Seq: r.st.Seq, Turn: r.st.Turn, ToolCalls: r.st.ToolCalls, Usage: r.st.Usage, StartedAt: r.st.StartedAt,
			Tools: r.tools, ToolsRef: r.toolsRef, Failures: r.failures, Inbox: r.inbox}}
}

func (r *run) modelTurn(ctx workflow.Context) (ModelTurnResult, error) {
	r.st.Turn++
	r.execTurns++
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: modelTurnTimeout,
		HeartbeatTimeout:    toolcall.HeartbeatTimeout,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: time.Minute,
			MaximumAttempts: 5, NonRetryableErrorTypes: []string{ErrTypeModel, toolcall.ErrTypeConfig}},
	})
	spec := r.in.Spec
	var res ModelTurnResult
	err := workflow.ExecuteActivity(actx, ModelTurnActivity, ModelTurnInput{RunID: r.in.RunID, Turn: r.st.Turn, Seq: r.st.Seq,
		Model: spec.Model, ToolsRef: r.toolsRef, Protocol: spec.ToolProtocol, Sequential: spec.Sequential,
		NoContent: r.noContent()}).Get(ctx, &res)
	if err != nil {
		return res, err
	}
	r.st.Seq = res.Seq
	r.st.Usage.InputTokens += res.Usage.InputTokens
	r.st.Usage.OutputTokens += res.Usage.OutputTokens
	return res, nil
}

// runCalls runs the calls of one turn: read-only and idempotent tools fan out,
// the others run one at a time in the model's order, each after its approval
// when it needs one. Results are appended in the model's order.
func (r *run) runCalls(ctx workflow.Context, res ModelTurnResult) error {
	callSeq, base := res.Seq-1, res.Seq
	results := make([]CallToolResult, len(res.Calls))
	budget := orDefault(r.in.Spec.Budget.MaxToolCalls, DefaultMaxToolCalls)
	overBudget := false
	// A pending call keeps how to schedule it again if it is lost with its
	// worker (toolcall.Await); local activities (opts nil) are not relaunched.
	type pending struct {
		i    int
		f    workflow.Future
		opts func() workflow.Context
		in   CallToolInput
		actx workflow.Context // where a call asking questions is made again
	}
	var batch []pending
	flush := func() error {
		for _, p := range batch {
			if err := toolcall.Await(ctx, p.f, p.opts, CallToolActivity, p.in, &results[p.i]); err != nil {
				return err
			}
			if err := r.answerRounds(ctx, p.actx, p.in, &results[p.i]); err != nil {
				return err
			}
		}
		batch = batch[:0]
		return nil
	}
	for i, c := range res.Calls {
		tool := r.tool(c.Name)
		if r.in.Spec.CodeMode {
			// The model was offered run_program only; the tools are the program's.
			tool = nil
			if c.Name == RunProgramTool {
				tool = &toolcall.Tool{ID: RunProgramTool, ModelName: RunProgramTool}
			}
		}
		in := CallToolInput{RunID: r.in.RunID, Turn: r.st.Turn, Index: i, CallSeq: callSeq, ResultSeq: base + i,
			Tool: tool, Principal: r.in.Principal, NoContent: r.noContent(), AskPeople: r.asksPeople()}
		opts, attempts := toolcall.Options(tool, r.callDefaults)
		in.MaxAttempts = attempts
		actx := workflow.WithActivityOptions(ctx, opts)
		if r.st.ToolCalls >= budget {
			overBudget = true
			in.Denial = "the run's tool-call budget is spent"
			batch = append(batch, pending{i, workflow.ExecuteActivity(actx, CallToolActivity, in), relaunchOn(actx), in, actx})
			continue
		}
		r.st.ToolCalls++
		if tool != nil {
			r.seen.Called(ctx, tool.ID)
		}
		if tool != nil && tool.ID == RunProgramTool {
			// A program may call side-effecting tools: it runs in the model's order.
			if err := flush(); err != nil {
				return err
			}
			var err error
			if results[i], err = r.runProgram(ctx, in); err != nil {
				return err
			}
			continue
		}
		approval := tool != nil && tool.NeedsApproval(r.in.Spec.Approval.Tools)
		if tool != nil && !approval && tool.ReadOnly && r.localReadOnly(ctx) {
			// Read-only calls run as local activities: no task round trip through
			// the server (docs/performance.md measures the difference).
			lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
				StartToCloseTimeout: opts.StartToCloseTimeout, RetryPolicy: opts.RetryPolicy})
			batch = append(batch, pending{i, workflow.ExecuteLocalActivity(lctx, CallToolActivity, in), nil, in, actx})
			continue
		}
		if tool == nil || (!approval && (tool.ReadOnly || tool.Idempotent)) {
			batch = append(batch, pending{i, workflow.ExecuteActivity(actx, CallToolActivity, in), relaunchOn(actx), in, actx})
			continue
		}
		if err := flush(); err != nil {
			return err
		}
		if approval {
			var err error
			if in.Approver, in.Denial, err = r.approve(ctx, i, callSeq, tool); err != nil {
				return err
			}
		}
		if err := toolcall.Await(ctx, workflow.ExecuteActivity(actx, CallToolActivity, in), relaunchOn(actx), CallToolActivity, in, &results[i]); err != nil {
			return err
		}
		if err := r.answerRounds(ctx, actx, in, &results[i]); err != nil {
			return err
		}
	}
	if err := flush(); err != nil {
		return err
	}
	r.st.Seq = base + len(res.Calls)
	for i, c := range res.Calls {
		if !results[i].IsError || results[i].Kind == toolcall.KindDenied {
			continue
		}
		if n := r.countFailure(c.Name + "/" + c.Digest); n > MaxSameFailure {
			return &endRun{StatusFailed, fmt.Sprintf("the model repeated a failing call of %s %d times", c.Name, n)}
		}
	}
	if overBudget {
		return &endRun{StatusBudgetExhausted, "max_tool_calls"}
	}
	return nil
}

// localReadOnly reports whether read-only calls run as local activities:
// version 1 of the change "local-read-only-calls"; histories recorded before
// it replay with regular activities.
func (r *run) localReadOnly(ctx workflow.Context) bool {
	return workflow.GetVersion(ctx, "local-read-only-calls", workflow.DefaultVersion, 1) >= 1
}

// noContent reports whether the run keeps content out of history, as its
// start decided (RunInput.HistoryContent). Only what activities return and
// what events say changes, never which commands the workflow issues, so a
// run replays the same whatever the setting is today.
func (r *run) noContent() bool { return r.in.HistoryContent == HistoryContentNone }

func (r *run) tool(modelName string) *toolcall.Tool {
	for i := range r.tools {
		if r.tools[i].ModelName == modelName {
			t := r.tools[i]
			return &t
		}
	}
	return nil
}

func (r *run) countFailure(key string) int {
	for i := range r.failures {
		if r.failures[i].Key == key {
			r.failures[i].Count++
			return r.failures[i].Count
		}
	}
	r.failures = append(r.failures, Failure{Key: key, Count: 1})
	return 1
}

// approve is the approval step (toolcall.Gate.Approve) of call index: no
// decision within the run's approval timeout is a denial.
func (r *run) approve(ctx workflow.Context, index, callSeq int, t *toolcall.Tool) (approver, denial string, err error) {
	callID := ids.RunCall(r.in.RunID, r.st.Turn, index)
	return r.gate.Approve(ctx, toolcall.Approval{
		Pending: toolcall.Pending{CallID: callID, ToolID: t.ID, Turn: r.st.Turn, Index: index, CallSeq: callSeq},
		Wait:    orDefault(r.in.Spec.Approval.Timeout, DefaultApprovalTimeout),
		Announce: func(ctx workflow.Context, kind, msg string) {
			r.publish(ctx, kind, r.st.Turn, callID, t.ID, msg, callID+"/"+kind)
		},
		Waiting: func(waiting bool) {
			r.st.Status = StatusRunning
			if waiting {
				r.st.Status = StatusWaitingApproval
			}
		},
	})
}

// finish ends the run after err: a budget or the model's repeated failure, a
// cancellation, the deadline, or a failure.
func (r *run) finish(ctx workflow.Context, err error) (RunState, error) {
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	var end *endRun
	switch {
	case errors.As(err, &end):
		r.st.Status, r.st.Failure = end.status, end.reason
	case r.deadline && ctx.Err() == nil:
		r.st.Status, r.st.Failure = StatusBudgetExhausted, "deadline"
	case ctx.Err() != nil || temporal.IsCanceledError(err):
		r.st.Status, r.st.Failure = StatusCanceled, "cancelled"
		r.publish(dctx, toolcall.EventCancelled, r.st.Turn, "", "", "", fmt.Sprintf("%s/cancelled/%d", r.in.RunID, r.st.Turn))
		return r.st, temporal.NewCanceledError("cancelled")
	default:
		r.st.Status, r.st.Failure = StatusFailed, failureMessage(err)
	}
	r.publish(dctx, toolcall.EventFailed, r.st.Turn, "", "", r.st.Status+": "+r.st.Failure, fmt.Sprintf("%s/failed/%d", r.in.RunID, r.st.Turn))
	if r.st.Status == StatusFailed {
		return r.st, temporal.NewNonRetryableApplicationError(r.st.Failure, "RunFailed", nil)
	}
	return r.st, nil
}

// failureMessage is the innermost application message of err.
func failureMessage(err error) string { return toolcall.FailureMessage(err) }

// publish sends a run event through a local activity; a failure to publish
// never stops the run (the event stream is for watchers, history is the truth).
func (r *run) publish(ctx workflow.Context, kind string, turn int, callID, toolID, msg, id string) {
	r.seen.Event(ctx, kind)
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: 10 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: 200 * time.Millisecond, MaximumAttempts: 5},
	})
	ev := toolcall.Event{RunID: r.in.RunID, Kind: kind, Turn: turn, CallID: callID, ToolID: toolID, Message: msg, ID: id, Time: workflow.Now(ctx)}
	if err := workflow.ExecuteLocalActivity(lctx, PublishEventActivity, ev).Get(lctx, nil); err != nil {
		workflow.GetLogger(ctx).Warn("run event not published", "kind", kind, "error", err)
	}
}

func orDefault[T int | int64 | time.Duration](v, def T) T {
	if v == 0 {
		return def
	}
	return v
}
