package program

import (
	"errors"
	"fmt"

	"go.starlark.net/starlark"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/toolfleet/toolfleet/orchestrator/toolcall"
)

// fail publishes the failed event and turns pe into the workflow's error.
func (r *runner) fail(ctx workflow.Context, pe *ProgramError) error {
	if r.orderedEvents {
		r.flush(ctx)
	}
	r.publishEvent(ctx, toolcall.Event{Kind: toolcall.EventFailed, Message: pe.Error(), Limit: pe.Limit})
	pe.ToolCalls = r.calls
	return r.failure(pe)
}

// failure is the workflow error of a failed program: not retryable, and
// carrying the ProgramError for clients. Its message is in history as text;
// without content in history it names the error's kind and limit only, and
// clients read the ProgramError from the details (by reference).
func (r *runner) failure(pe *ProgramError) error {
	msg := pe.Error()
	if r.values && r.in.NoContentInHistory {
		msg = "program failed: " + pe.Kind
		if pe.Limit != "" {
			msg += " (limit " + pe.Limit + ")"
		}
	}
	return temporal.NewNonRetryableApplicationError(msg, ErrorType, nil, pe)
}

// classify turns an error out of the interpreter into a ProgramError with the
// script position of the innermost frame.
func (r *runner) classify(err error) *ProgramError {
	var pe *ProgramError
	var le *limitError
	var fe *failError
	var ce *crashError
	switch {
	case errors.As(err, &ce):
		pe = &ProgramError{Kind: "internal", Message: ce.Error()}
	case r.stepsHit:
		pe = &ProgramError{Kind: "limit", Limit: LimitSteps,
			Message: fmt.Sprintf("limit %s: the program ran more than %d steps", LimitSteps, r.lim.MaxSteps)}
	case errors.As(err, &le):
		pe = &ProgramError{Kind: "limit", Limit: le.limit, Message: le.Error()}
	case errors.As(err, &fe):
		pe = &ProgramError{Kind: "fail", Message: fe.msg}
	default:
		msg := err.Error()
		if ee := innermost(err); ee != nil {
			msg = ee.Msg
		}
		pe = &ProgramError{Kind: "runtime", Message: msg}
	}
	if ee := innermost(err); ee != nil {
		positioned(pe, r.in.Source, scriptPosition(ee.CallStack, r.in.Filename))
		pe.Backtrace = ee.Backtrace()
	}
	return pe
}

// innermost is the deepest Starlark evaluation error in err's chain: the one
// raised by the function that failed inside parallel, for instance.
func innermost(err error) *starlark.EvalError {
	var last *starlark.EvalError
	for err != nil {
		var ee *starlark.EvalError
		if !errors.As(err, &ee) {
			break
		}
		last = ee
		err = ee.Unwrap()
	}
	return last
}

// limitError ends a program because a limit was hit.
type limitError struct {
	limit string
	msg   string
}

// failError is raised by fail().
type failError struct{ msg string }

func (e *limitError) Error() string { return "limit " + e.limit + ": " + e.msg }

func (e *failError) Error() string { return e.msg }
