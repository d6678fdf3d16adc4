package program

import (
	"errors"
	"fmt"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"
	"go.temporal.io/sdk/workflow"

	"github.com/toolfleet/toolfleet/orchestrator/toolcall"
)

// A program that is one tool call (Input.Call; RunProgramRequest.tool_call):
// no script. The call is made as call() makes it in a script (the contract's
// validation, the approval gate, the limits, a durable activity), and the
// program's result is the call's outcome as data, as this script computed it
// (MCP tasks ran long tool calls with it before the spec existed):
//
//	r = call(tool, **input)
//	result = {"tool": tool, "ok": r.ok, "value": r.value, "error": None if r.ok else
//	          {"kind": r.error.kind, "message": r.error.message, "fields": r.error.fields}}

// toolCallChangeID is recorded (version 1) by every program of this form, so
// that a later change of the form can tell its histories apart.
const toolCallChangeID = "program-tool-call"

// ToolCall is a program that is one call of one tool.
type ToolCall struct {
	// ToolID is the tool's id (no glob); Input.Tools is exactly it.
	ToolID string `json:"tool_id"`
	// InputJSON is the tool's input, a JSON object; empty means {}.
	InputJSON string `json:"input_json,omitempty"`
	// Answers (MCP ElicitResults as JSON, keyed as the tool asked) and the
	// sealed RequestState of the round the tool asked before the program
	// started (an MCP client answered it inline): the call's first round
	// carries them when the program takes questions.
	Answers      map[string]string `json:"answers,omitempty"`
	RequestState string            `json:"request_state,omitempty"`
}

// runCall runs a program that is r.in.Call.
func (r *runner) runCall(ctx workflow.Context) (*Output, error) {
	workflow.GetVersion(ctx, toolCallChangeID, workflow.DefaultVersion, 1)
	c := r.in.Call
	t := r.byName[c.ToolID]
	if t == nil {
		return nil, r.fail(ctx, &ProgramError{Kind: "tools", Message: fmt.Sprintf("tool %q is not one this program may call (allowed: %s)", c.ToolID, r.allowedList())})
	}
	input := c.InputJSON
	if input == "" {
		input = "{}"
	}
	v, err := fromJSON(input, r.maxDigits())
	if err != nil {
		var le *limitError
		if errors.As(err, &le) {
			return nil, r.fail(ctx, &ProgramError{Kind: "limit", Limit: le.limit, Message: "input: " + le.Error()})
		}
		return nil, r.fail(ctx, &ProgramError{Kind: "runtime", Message: "input: " + err.Error()})
	}
	d, ok := v.(*starlark.Dict)
	if !ok {
		return nil, r.fail(ctx, &ProgramError{Kind: "runtime", Message: "the tool's input must be a JSON object"})
	}
	kwargs := make([]starlark.Tuple, 0, d.Len())
	for _, kv := range d.Items() {
		kwargs = append(kwargs, starlark.Tuple{kv[0], kv[1]})
	}
	th := r.newThread(ctx, "main", r.lim.MaxSteps)
	r.rootSteps = func() uint64 { return th.Steps }
	res, err := r.invoke(th, t, kwargs)
	if err != nil {
		if r.canceled || ctx.Err() != nil {
			dctx, _ := workflow.NewDisconnectedContext(ctx)
			r.publish(dctx, toolcall.EventCancelled, "", "", "")
			return nil, workflow.ErrCanceled
		}
		return nil, r.fail(ctx, r.classify(err))
	}
	result, err := callOutcome(c.ToolID, res)
	if err != nil {
		return nil, r.fail(ctx, &ProgramError{Kind: "internal", Message: err.Error()})
	}
	b, err := toJSON(result, r.lim.MaxResultBytes)
	if err != nil {
		pe := &ProgramError{Kind: "runtime", Message: "result: " + err.Error()}
		if errors.Is(err, errTooLarge) {
			pe = &ProgramError{Kind: "limit", Limit: LimitResult,
				Message: fmt.Sprintf("limit %s: the result is over %d bytes of JSON", LimitResult, r.lim.MaxResultBytes)}
		}
		return nil, r.fail(ctx, pe)
	}
	out := &Output{ResultJSON: string(b), ToolCalls: r.calls, Steps: th.Steps}
	if r.orderedEvents {
		r.flush(ctx)
	}
	r.publish(ctx, toolcall.EventCompleted, "", "", "")
	return out, nil
}

// callOutcome is the result of a one-call program from the call's result
// object (resultObject).
func callOutcome(tool string, res starlark.Value) (*starlark.Dict, error) {
	s, ok := res.(*starlarkstruct.Struct)
	if !ok {
		return nil, fmt.Errorf("a call's result is a %s", res.Type())
	}
	attr := func(s *starlarkstruct.Struct, name string) starlark.Value {
		v, err := s.Attr(name)
		if err != nil || v == nil {
			return starlark.None
		}
		return v
	}
	ok2 := attr(s, "ok")
	out := starlark.NewDict(4)
	_ = out.SetKey(starlark.String("tool"), starlark.String(tool))
	_ = out.SetKey(starlark.String("ok"), ok2)
	_ = out.SetKey(starlark.String("value"), attr(s, "value"))
	errv := starlark.Value(starlark.None)
	if e, isErr := attr(s, "error").(*starlarkstruct.Struct); isErr && ok2 != starlark.True {
		ed := starlark.NewDict(3)
		_ = ed.SetKey(starlark.String("kind"), attr(e, "kind"))
		_ = ed.SetKey(starlark.String("message"), attr(e, "message"))
		_ = ed.SetKey(starlark.String("fields"), attr(e, "fields"))
		errv = ed
	}
	_ = out.SetKey(starlark.String("error"), errv)
	return out, nil
}
