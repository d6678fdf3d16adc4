package program

import (
	"errors"
	"fmt"
	"strings"

	"go.starlark.net/starlark"
	"go.temporal.io/sdk/workflow"

	"github.com/toolfleet/toolfleet/orchestrator/ids"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall"
)

// callBuiltin is call(tool_id, **kwargs).
func (r *runner) callBuiltin(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	if len(args) != 1 {
		return nil, fmt.Errorf("%s: want call(tool_id, **kwargs), got %d positional arguments", b.Name(), len(args))
	}
	id, ok := starlark.AsString(args[0])
	if !ok {
		return nil, fmt.Errorf("%s: tool_id is a %s, want a string", b.Name(), args[0].Type())
	}
	t := r.byName[id]
	if t == nil {
		return nil, fmt.Errorf("%s: tool %q is not allowed in this program (allowed: %s)", b.Name(), id, r.allowedList())
	}
	return r.invoke(th, t, kwargs)
}

func (r *runner) allowedList() string {
	if len(r.tools) == 0 {
		return "none"
	}
	names := make([]string, len(r.tools))
	for i, t := range r.tools {
		names[i] = t.Name
	}
	return strings.Join(names, ", ")
}

// hasKwarg reports whether kwargs has an argument called name.
func hasKwarg(kwargs []starlark.Tuple, name string) bool {
	for _, kv := range kwargs {
		if s, ok := kv[0].(starlark.String); ok && string(s) == name {
			return true
		}
	}
	return false
}

// protoNames reports whether stubs take a field's proto name for its JSON name
// (tools.go, paramOf). Asked the first time a program uses one, so that only
// those programs record the version; a history recorded before it refused the
// argument (a validation result) and replays so.
func (r *runner) protoNames(ctx workflow.Context) bool {
	if r.protoNamesVer == nil {
		v := workflow.GetVersion(ctx, protoNamesChangeID, workflow.DefaultVersion, 1) >= 1
		r.protoNamesVer = &v
	}
	return *r.protoNamesVer
}

// invoke calls tool t with kwargs as its input and returns a result object.
func (r *runner) invoke(th *starlark.Thread, t *boundTool, kwargs []starlark.Tuple) (starlark.Value, error) {
	ctx := wctx(th)
	if err := r.checkDeadline(ctx); err != nil {
		return nil, err
	}
	input := starlark.NewDict(len(kwargs))
	for _, kv := range kwargs {
		key := kv[0]
		// document_json= for documentJson=, unless both are given (then the
		// schema refuses the extra one).
		if name, ok := key.(starlark.String); ok {
			if p := t.paramOf(string(name)); p != "" && !hasKwarg(kwargs, p) && r.protoNames(ctx) {
				key = starlark.String(p)
			}
		}
		_ = input.SetKey(key, kv[1])
	}
	in, err := toJSON(input, r.lim.MaxValueBytes)
	if errors.Is(err, errTooLarge) {
		return nil, &limitError{limit: LimitValue, msg: fmt.Sprintf("the input of %s is over %d bytes of JSON", t.Name, r.lim.MaxValueBytes)}
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", t.ModelName, err)
	}
	if r.values && r.b != nil {
		if err := r.b.charge(strSize(ulen(len(in))), "the input of "+t.Name); err != nil {
			return nil, err
		}
	}
	if fields := t.validate(in); fields != nil {
		return r.resultObject(CallResult{Error: &CallError{Kind: toolcall.KindValidation,
			Message: "the input does not fit " + t.Name + "'s contract", Fields: fields}}, "")
	}
	if r.calls >= r.lim.MaxToolCalls {
		return nil, &limitError{limit: LimitToolCalls, msg: fmt.Sprintf("the program made more than %d tool calls", r.lim.MaxToolCalls)}
	}
	r.calls++
	req := CallRequest{CallID: ids.ProgramCall(r.in.ProgramID, r.calls), ToolID: t.ID, InputJSON: string(in),
		Principal: r.in.Principal, MaxValueBytes: r.lim.MaxValueBytes, AskPeople: r.in.AskPeople}
	if c := r.in.Call; c != nil && r.calls == 1 && r.in.AskPeople {
		// Questions the tool asked before the program started, answered.
		req.Answers, req.RequestState = c.Answers, c.RequestState
	}

	if t.NeedsApproval(r.in.Approval) {
		approver, denial, err := r.approval(ctx, req)
		if err != nil {
			return nil, err
		}
		if denial != nil {
			return r.resultObject(CallResult{Error: denial}, req.CallID)
		}
		req.Approver = approver
	}

	// One more call in flight, within the program's width. (AwaitWithTimeout
	// records a timer in history, so it is used only when the width is full.)
	if r.inflight >= r.lim.MaxWidth {
		ok, err := workflow.AwaitWithTimeout(ctx, r.dead.Sub(workflow.Now(ctx)), func() bool { return r.inflight < r.lim.MaxWidth })
		if err != nil {
			r.canceled = true
			return nil, errCanceled
		}
		if !ok {
			return nil, r.deadlineError()
		}
	}
	r.inflight++
	defer func() { r.inflight-- }()

	var res CallResult
	r.seen.Called(ctx, t.ID)
	opts := func() workflow.Context { return r.activityContext(ctx, t) }
	err = toolcall.Await(ctx, workflow.ExecuteActivity(opts(), CallToolActivity, req), opts, CallToolActivity, req, &res)
	if err == nil && res.Asked != nil {
		err = r.answerRounds(ctx, opts, req, &res)
	}
	switch {
	case err == nil:
	case ctx.Err() != nil:
		r.canceled = true
		return nil, errCanceled
	case !workflow.Now(ctx).Before(r.dead):
		return nil, r.deadlineError()
	default:
		// Temporal's retries are spent: the script decides what to do.
		res = CallResult{Error: &CallError{Kind: toolcall.KindExecution, Message: activityMessage(err), CanRetry: true}}
	}
	if res.Error != nil && res.Error.Kind == toolcall.KindTooLarge {
		return nil, &limitError{limit: LimitValue, msg: fmt.Sprintf("the result of %s is over %d bytes of JSON", t.Name, r.lim.MaxValueBytes)}
	}
	if res.Error != nil && res.Error.Kind == toolcall.KindStorage {
		// The owner's quota or the shared store refused the program's
		// values before the call (valuequota.go): the program ends.
		return nil, &limitError{limit: LimitStorage, msg: res.Error.Message}
	}
	return r.resultObject(res, req.CallID)
}

// activityContext sets the CallTool activity's timeouts and retries from the
// tool's contract (toolcall.Options), within the program's deadline.
func (r *runner) activityContext(ctx workflow.Context, t *boundTool) workflow.Context {
	opts, _ := toolcall.Options(&t.Tool.Tool, r.callDefaults)
	opts.ScheduleToCloseTimeout = r.dead.Sub(workflow.Now(ctx))
	return workflow.WithActivityOptions(ctx, opts)
}

// approval is the approval step (toolcall.Gate.Approve) of req's call,
// within the program's deadline. It returns the approver, or the denial the
// script sees.
func (r *runner) approval(ctx workflow.Context, req CallRequest) (string, *CallError, error) {
	approver, denial, err := r.gate.Approve(ctx, toolcall.Approval{
		Pending:   toolcall.Pending{CallID: req.CallID, ToolID: req.ToolID, InputJSON: req.InputJSON},
		Wait:      min(r.lim.ApprovalWait, r.dead.Sub(workflow.Now(ctx))),
		Deadline:  r.dead,
		Requested: req.InputJSON,
		Announce: func(ctx workflow.Context, kind, msg string) {
			r.publish(ctx, kind, req.CallID, req.ToolID, msg)
		},
		Waiting: func(waiting bool) {
			r.status = StatusRunning
			if waiting {
				r.status = StatusWaitingApproval
			}
		},
	})
	switch {
	case errors.Is(err, toolcall.ErrDeadline):
		return "", nil, r.deadlineError()
	case err != nil:
		r.canceled = true
		return "", nil, errCanceled
	case denial != "":
		return "", &CallError{Kind: toolcall.KindDenied, Message: denial}, nil
	}
	return approver, nil, nil
}

// maxDigits is the most digits of an int read from JSON (0: no limit).
func (r *runner) maxDigits() int {
	if r.ints {
		return MaxIntDigits
	}
	return 0
}

// resultObject is resultObject with the runner's bound on ints.
func (r *runner) resultObject(res CallResult, callID string) (starlark.Value, error) {
	return resultObject(res, callID, r.maxDigits())
}
