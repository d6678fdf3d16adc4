package program

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"go.starlark.net/lib/json"
	"go.starlark.net/starlark"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/toolfleet/toolfleet/orchestrator/toolcall"
	"github.com/toolfleet/toolfleet/orchestrator/visibility"
)

// ProgramWorkflow runs one Starlark program. It never does I/O: tools are
// resolved and called by activities, events are published by activities, and
// the interpreter sees only workflow time. A failed program ends with a
// non-retryable application error of type [ErrorType] whose details hold a
// [ProgramError].
func ProgramWorkflow(ctx workflow.Context, in Input) (*Output, error) {
	// Every history records the interpreter that wrote it (see InterpreterVersion).
	workflow.GetVersion(ctx, interpreterChangeID, minInterpreterVersion, InterpreterVersion)

	if in.ProgramID == "" {
		in.ProgramID = workflow.GetInfo(ctx).WorkflowExecution.ID
	}
	if in.Filename == "" {
		in.Filename = DefaultFilename
	}
	r := &runner{in: in, started: workflow.Now(ctx), gate: toolcall.NewGate(), desk: toolcall.NewDesk(), status: StatusRunning,
		callDefaults: toolcall.Standard, seen: visibility.NewTracker(ctx, visibility.KindProgram, in.Visibility)}
	// Version 1 schedules tool calls with the options both engines share
	// (toolcall.Standard); histories recorded before keep the former ones.
	if workflow.GetVersion(ctx, toolcall.OptionsChangeID, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		r.callDefaults = legacyCallDefaults
	}
	// Version 1 publishes "started" before anything else and the final event
	// after every other one, so a watcher that stops at the final event has
	// seen them all. Histories recorded before it replay without the waits.
	r.orderedEvents = workflow.GetVersion(ctx, orderedEventsChangeID, workflow.DefaultVersion, 1) >= 1
	// Version 1 publishes events with local activities: one marker in
	// history instead of three events, and no task round trip.
	r.localEvents = workflow.GetVersion(ctx, localEventsChangeID, workflow.DefaultVersion, 1) >= 1
	// Version 1 bounds the script as a whole (bounds.go): one step budget
	// across parallel, checked as it runs, and a memory budget.
	r.bounded = workflow.GetVersion(ctx, scriptBoundsChangeID, workflow.DefaultVersion, 1) >= 1
	// Version 1 charges the JSON of every tool input to the memory budget
	// (with tool results, already charged, it bounds what a program stores
	// by reference: valuestore.go), and keeps the error message of a
	// program started with NoContentInHistory free of content.
	r.values = workflow.GetVersion(ctx, valuesChangeID, workflow.DefaultVersion, 1) >= 1
	// Version 1 bounds big ints to MaxIntBits and charges their work to the
	// step budget (budget_ints.go).
	r.ints = r.bounded && workflow.GetVersion(ctx, intsChangeID, workflow.DefaultVersion, 1) >= 1
	// Version 1 answers approvals under the program's own Update name only;
	// programs recorded before it also answer the name runs use.
	r.updateNames = []string{UpdateDecideApproval}
	if workflow.GetVersion(ctx, updateNameChangeID, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		r.updateNames = append(r.updateNames, legacyUpdateDecideApproval)
	}
	if err := r.setup(ctx); err != nil {
		return nil, err
	}
	r.publish(ctx, toolcall.EventStarted, "", "", "")
	if r.orderedEvents {
		r.flush(ctx)
	}
	out, err := r.run(ctx)
	r.flush(ctx)
	return out, err
}

// runner is the state of one program execution inside the workflow.
type runner struct {
	// seen keeps the search attributes in step (orchestrator/visibility).
	seen    *visibility.Tracker
	in      Input
	lim     Limits
	started time.Time
	dead    time.Time
	tools   []*boundTool
	byName  map[string]*boundTool

	calls     int
	inflight  int
	rootSteps func() uint64
	spent     uint64 // steps of finished parallel threads
	stepsHit  bool
	canceled  bool

	status       string
	gate         *toolcall.Gate
	desk         *toolcall.Desk
	callDefaults toolcall.Defaults

	events        []workflow.Future
	eventSeq      int
	prints        int
	orderedEvents bool
	localEvents   bool
	bounded       bool
	values        bool
	ints          bool
	b             *bounds // set when bounded
	updateNames   []string
	protoNamesVer *bool // protoNames, once asked
}

const (
	orderedEventsChangeID = "ordered-events"
	localEventsChangeID   = "local-events"
	updateNameChangeID    = "program-update-name"
	valuesChangeID        = "program-values"
	intsChangeID          = "script-ints"
	protoNamesChangeID    = "program-proto-names"
)

// legacyCallDefaults are the call options of programs recorded before
// toolcall.Standard: 1 minute and 10 s without a contract timeout, the
// contract's plus 10 s with one, 0.2–10 s backoff.
var legacyCallDefaults = toolcall.Defaults{Timeout: time.Minute, Margin: 10 * time.Second, Attempts: 3,
	InitialBackoff: 200 * time.Millisecond, MaxBackoff: 10 * time.Second}

// setup validates the input, registers the query and the approval Update, and
// resolves the allowed tools.
func (r *runner) setup(ctx workflow.Context) error {
	if err := ValidProgramID(r.in.ProgramID); err != nil {
		return r.failure(&ProgramError{Kind: "internal", Message: err.Error()})
	}
	maxCalls := MaxToolCalls
	if !r.values {
		maxCalls = legacyMaxToolCalls // a program started under the former ceiling
	}
	lim, err := r.in.Limits.withDefaults(maxCalls)
	if err != nil {
		return r.failure(&ProgramError{Kind: "limit", Message: err.Error()})
	}
	r.lim = lim
	r.dead = r.started.Add(lim.Deadline)
	if r.bounded {
		r.b = newBounds(r)
	}

	if err := workflow.SetQueryHandler(ctx, QueryGetProgram, func() (State, error) {
		st := State{ProgramID: r.in.ProgramID, Status: r.status, ToolCalls: r.calls,
			Pending: r.gate.Pending(), Questions: r.desk.Pending(), StartedAt: r.started}
		if r.rootSteps != nil {
			st.Steps = r.rootSteps() + r.spent
		}
		return st, nil
	}); err != nil {
		return fmt.Errorf("program: query handler: %w", err)
	}
	if err := r.gate.Register(ctx, r.updateNames...); err != nil {
		return fmt.Errorf("program: %w", err)
	}
	if err := r.desk.Register(ctx, UpdateAnswerInput); err != nil {
		return fmt.Errorf("program: %w", err)
	}

	if len(r.in.Tools) > 0 {
		actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			StartToCloseTimeout: 30 * time.Second,
			HeartbeatTimeout:    10 * time.Second, // a dead worker's attempt is retried after this
			RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2,
				MaximumInterval: 10 * time.Second, MaximumAttempts: 5},
		})
		var tools []Tool
		err := workflow.ExecuteActivity(actx, ResolveToolsActivity,
			ResolveRequest{Patterns: r.in.Tools, Principal: r.in.Principal}).Get(ctx, &tools)
		if err != nil {
			return r.failure(&ProgramError{Kind: "tools", Message: "resolve the allowed tools: " + activityMessage(err)})
		}
		bound, err := bindTools(tools)
		if err != nil {
			return r.failure(&ProgramError{Kind: "tools", Message: err.Error()})
		}
		r.tools = bound
	}
	r.byName = map[string]*boundTool{}
	for _, t := range r.tools {
		r.byName[t.ID] = t
		r.byName[t.Name] = t
		r.byName[t.ModelName] = t
	}
	return nil
}

// run compiles and executes the script, and encodes its result. A program
// that is one tool call has no script (onecall.go).
func (r *runner) run(ctx workflow.Context) (*Output, error) {
	if r.in.Call != nil {
		return r.runCall(ctx)
	}
	predeclared := r.predeclared()
	prog, chk, err := compile(r.in.Filename, r.in.Source, predeclared.Has, r.b != nil)
	if err != nil {
		var pe *ProgramError
		if errors.As(err, &pe) {
			return nil, r.fail(ctx, pe)
		}
		return nil, r.fail(ctx, &ProgramError{Kind: "syntax", Message: err.Error()})
	}
	args, err := fromJSON(r.in.ArgsJSON, r.maxDigits())
	if err != nil {
		var le *limitError
		if errors.As(err, &le) {
			return nil, r.fail(ctx, &ProgramError{Kind: "limit", Limit: le.limit, Message: "args: " + le.Error()})
		}
		return nil, r.fail(ctx, &ProgramError{Kind: "runtime", Message: "args: " + err.Error()})
	}
	if args == starlark.None {
		args = starlark.NewDict(0)
	}
	if _, ok := args.(*starlark.Dict); !ok {
		return nil, r.fail(ctx, &ProgramError{Kind: "runtime", Message: "args must be a JSON object"})
	}
	predeclared["args"] = args

	// The replica's script memory (admission.go): wait for room for the
	// budget, or give the workflow task back to Temporal.
	release, err := currentAdmission().acquire(r.lim.MaxMemoryBytes)
	if err != nil {
		var ae *admissionError
		if errors.As(err, &ae) && ae.tooBig {
			return nil, r.fail(ctx, &ProgramError{Kind: "limit", Limit: LimitMemory, Message: "limit " + LimitMemory + ": " + err.Error()})
		}
		panic(err) // not in history: Temporal retries the workflow task
	}
	defer release()

	th := r.newThread(ctx, "main", r.lim.MaxSteps)
	if r.b != nil {
		if err := r.b.charge(modelSize(args), "args"); err != nil {
			return nil, r.fail(ctx, r.classify(err))
		}
	}
	r.rootSteps = func() uint64 { return th.Steps }
	globals, err := protect(r.b != nil, func() (starlark.StringDict, error) { return prog.Init(th, predeclared) })
	if err != nil {
		if r.canceled || ctx.Err() != nil {
			dctx, _ := workflow.NewDisconnectedContext(ctx)
			r.publish(dctx, toolcall.EventCancelled, "", "", "")
			return nil, workflow.ErrCanceled
		}
		return nil, r.fail(ctx, r.classify(err))
	}
	result := globals["result"]
	if result == nil {
		result = starlark.None
	}
	b, err := toJSON(result, r.lim.MaxResultBytes)
	if err != nil {
		pe := &ProgramError{Kind: "runtime", Message: "result: " + err.Error()}
		if errors.Is(err, errTooLarge) {
			pe = &ProgramError{Kind: "limit", Limit: LimitResult,
				Message: fmt.Sprintf("limit %s: the result is over %d bytes of JSON", LimitResult, r.lim.MaxResultBytes)}
		}
		return nil, r.fail(ctx, positioned(pe, r.in.Source, chk.resultPos))
	}
	out := &Output{ResultJSON: string(b), ToolCalls: r.calls, Steps: th.Steps + r.spent}
	if r.orderedEvents {
		r.flush(ctx)
	}
	r.publish(ctx, toolcall.EventCompleted, "", "", "")
	return out, nil
}

// errCanceled unwinds the interpreter when the workflow is cancelled.
var errCanceled = errors.New("program cancelled")

const ctxLocal = "toolfleet.workflow.ctx"
const budgetLocal = "toolfleet.step.budget"

// newThread makes an interpreter thread bound to the workflow coroutine of ctx:
// the script's and every function parallel runs. A bounded program's threads
// run on the program's one step budget (bounds.thread; budget is unused);
// before "script-bounds", each thread had budget steps of its own.
func (r *runner) newThread(ctx workflow.Context, name string, budget uint64) *starlark.Thread {
	th := &starlark.Thread{
		Name: name,
		Load: func(*starlark.Thread, string) (starlark.StringDict, error) {
			return nil, errors.New("load is not available in programs")
		},
		OnMaxSteps: func(th *starlark.Thread) {
			r.stepsHit = true
			th.Cancel("too many steps")
		},
	}
	th.Print = func(th *starlark.Thread, msg string) { r.print(th, msg) }
	th.SetLocal(ctxLocal, ctx)
	th.SetLocal(budgetLocal, budget)
	th.SetMaxExecutionSteps(budget)
	if r.b != nil {
		r.b.thread(th)
	}
	return th
}

// wctx is the workflow context of the coroutine running th.
func wctx(th *starlark.Thread) workflow.Context { return th.Local(ctxLocal).(workflow.Context) }

// predeclared is the globals of a program: builtins and one stub per tool.
func (r *runner) predeclared() starlark.StringDict {
	d := starlark.StringDict{
		"call":     starlark.NewBuiltin("call", r.callBuiltin),
		"parallel": starlark.NewBuiltin("parallel", r.parallelBuiltin),
		"json":     json.Module,
		"fail":     starlark.NewBuiltin("fail", failBuiltin),
		"args":     starlark.None, // set before running
	}
	defer func() {
		if r.b != nil {
			r.b.builtins(d)
		}
	}()
	for _, t := range r.tools {
		d[t.ModelName] = starlark.NewBuiltin(t.ModelName, func(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
			if len(args) > 0 {
				return nil, fmt.Errorf("%s: takes keyword arguments only, e.g. %s", b.Name(), t.Signature())
			}
			return r.invoke(th, t, kwargs)
		})
	}
	return d
}

// failBuiltin ends the program: fail(msg).
func failBuiltin(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	parts := make([]string, 0, len(args))
	for _, a := range args {
		if s, ok := starlark.AsString(a); ok {
			parts = append(parts, s)
		} else {
			parts = append(parts, a.String())
		}
	}
	if len(kwargs) > 0 {
		return nil, fmt.Errorf("%s: unexpected keyword arguments", b.Name())
	}
	return nil, &failError{msg: strings.Join(parts, " ")}
}

// checkDeadline fails once the program's deadline has passed.
func (r *runner) checkDeadline(ctx workflow.Context) error {
	if ctx.Err() != nil {
		r.canceled = true
		return errCanceled
	}
	if !workflow.Now(ctx).Before(r.dead) {
		return r.deadlineError()
	}
	return nil
}

func (r *runner) deadlineError() error {
	return &limitError{limit: LimitDeadline, msg: fmt.Sprintf("the program ran longer than %s", r.lim.Deadline)}
}

// print publishes a print event; past MaxPrints, prints are dropped.
func (r *runner) print(th *starlark.Thread, msg string) {
	if r.prints >= MaxPrints {
		return
	}
	r.prints++
	if len(msg) > MaxPrintBytes {
		msg = msg[:MaxPrintBytes] + "…"
	}
	r.publish(wctx(th), toolcall.EventPrint, "", "", msg)
}

// publish starts the PublishEvent activity without waiting; flush waits for
// every event before the workflow ends.
func (r *runner) publish(ctx workflow.Context, kind, callID, toolID, msg string) {
	r.publishEvent(ctx, toolcall.Event{Kind: kind, CallID: callID, ToolID: toolID, Message: msg})
}

// publishEvent is publish of ev, given its run id, event id and time.
func (r *runner) publishEvent(ctx workflow.Context, ev toolcall.Event) {
	r.seen.Event(ctx, ev.Kind)
	r.eventSeq++
	ev.RunID, ev.ID, ev.Time = r.in.ProgramID, fmt.Sprintf("%s/e%d", r.in.ProgramID, r.eventSeq), workflow.Now(ctx)
	retry := &temporal.RetryPolicy{InitialInterval: 500 * time.Millisecond, BackoffCoefficient: 2,
		MaximumInterval: 5 * time.Second, MaximumAttempts: 3}
	if r.localEvents {
		lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{StartToCloseTimeout: 10 * time.Second, RetryPolicy: retry})
		r.events = append(r.events, workflow.ExecuteLocalActivity(lctx, PublishEventActivity, ev))
		return
	}
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 10 * time.Second, RetryPolicy: retry})
	r.events = append(r.events, workflow.ExecuteActivity(actx, PublishEventActivity, ev))
}

// flush waits for the published events; a lost event is logged, never fatal.
func (r *runner) flush(ctx workflow.Context) {
	ctx, _ = workflow.NewDisconnectedContext(ctx) // publish "cancelled" programs' last events too
	for _, f := range r.events {
		if err := f.Get(ctx, nil); err != nil {
			workflow.GetLogger(ctx).Warn("program event not published", "program_id", r.in.ProgramID, "error", err)
		}
	}
	r.events = r.events[:0]
}

// activityMessage is the message of an activity failure without Temporal's wrapping.
func activityMessage(err error) string { return toolcall.FailureMessage(err) }
