package toolcall

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolfleet/toolfleet/sdk/client"
)

// Kind is what became of a tool call: the one vocabulary of runs and
// programs. The values are persisted (in activity results in history, in a
// program's CallError.kind that scripts read, in metric labels) and never
// change.
type Kind string

// Kinds of a gateway outcome, as [Classify] reads them.
const (
	// KindOK: the tool ran and succeeded; Value holds its result.
	KindOK Kind = "ok"
	// KindValidation: the input does not fit the contract (Fields says where).
	KindValidation Kind = "validation"
	// KindExecution: the tool ran and failed, and asked for no retry.
	KindExecution Kind = "execution"
	// KindRefused: the gateway refused the call before it ran (unknown tool,
	// missing scope, approval required): retrying cannot help.
	KindRefused Kind = "refused"
	// KindRetry: worth another attempt: the gateway was unreachable or busy,
	// or the tool failed and asked for a retry (after RetryAfter).
	KindRetry Kind = "retry"
	// KindConfig: the orchestrator itself is not authenticated at the
	// gateway; no run or program can fix that.
	KindConfig Kind = "config"
	// KindInput: the tool asked its caller for input, or the gateway asked
	// the caller to connect an account first (Asked holds the round); not
	// a result: the call is made again with the answers, or
	// rendered as [KindExecution] with [Call.Declined].
	KindInput Kind = "input"
)

// Kinds of a call the gateway never answered, decided by the engine.
const (
	// KindDenied: the call was not approved (denied, or no decision in
	// time), or a run's tool-call budget was spent; nothing was called.
	KindDenied Kind = "denied"
	// KindUnknownTool: a run's model named a tool the run does not have.
	KindUnknownTool Kind = "unknown_tool"
	// KindTooLarge: a program's call result is over its max_value_bytes.
	KindTooLarge Kind = "too_large"
	// KindStorage: a program's stored values are over its owner's quota or
	// the shared store's room; the call was not made and the program ends.
	KindStorage Kind = "storage"
	// KindServer is [KindRefused] as programs have always named it: a
	// script's error.kind, the program metrics' outcome label and recorded
	// program histories say "server" (see [Kind.ForProgram]).
	KindServer Kind = "server"
)

// ForProgram is k as a program's script reads it: [KindServer] for
// [KindRefused], k itself otherwise.
func (k Kind) ForProgram() Kind {
	if k == KindRefused {
		return KindServer
	}
	return k
}

// Outcome is one reading of a gateway call's result or error.
type Outcome struct {
	Kind    Kind
	Message string
	// Fields maps input fields to what is wrong with them (KindValidation).
	Fields map[string]string
	// Hint is the tool's additional prompt content (KindExecution, KindRetry).
	Hint string
	// ToolRetry is true for a KindRetry the tool asked for (as opposed to a
	// gateway that did not answer); RetryAfter is the delay it asked for, or
	// the delay the gateway gave a call over a rate limit or quota.
	ToolRetry  bool
	RetryAfter time.Duration
	// Value is the result (KindOK); Duration is how long the tool ran.
	Value    *structpb.Value
	Duration time.Duration
	// Err is the gateway error behind KindRetry and KindConfig, if any.
	Err error
	// Asked is the tool's round of questions (KindInput).
	Asked *Asked
}

// Transient reports whether a gateway status code is worth another attempt.
//
// Canceled is transient: the activity's own cancellation is seen through its
// context before this is asked (see [Classify]), so a Canceled from the
// gateway while the activity is alive means the call was cut off on the way
// (a gateway or worker shutting down, a dropped connection). The call id
// makes a repeat safe — the gateway answers it from its idempotency store —
// whereas handing it to the model or the script as a final failure would
// turn a restart into a wrong answer.
func Transient(c codes.Code) bool {
	switch c {
	case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted, codes.Internal,
		codes.Unknown, codes.Canceled:
		return true
	}
	return false
}

// Classify reads the outcome of a gateway CallTool. An error of ctx itself
// (the activity was cancelled or timed out) is returned as err, for Temporal
// to see; everything else is an Outcome.
func Classify(ctx context.Context, res *client.Result, err error) (Outcome, error) {
	var ve *client.ValidationError
	var se *client.ServerError
	switch {
	case err != nil && ctx.Err() != nil:
		return Outcome{}, ctx.Err()
	case errors.As(err, &ve):
		return Outcome{Kind: KindValidation, Message: ve.Message, Fields: ve.ParameterErrors}, nil
	case errors.As(err, &se) && se.Code == codes.Unauthenticated:
		return Outcome{Kind: KindConfig, Message: "the orchestrator is not authenticated at the gateway: " + se.Message, Err: err}, nil
	case errors.As(err, &se) && Transient(se.Code):
		// A refusal over a rate limit or quota says when to come back.
		msg := se.Message
		if !se.Answered {
			msg = noAnswer(msg)
		}
		return Outcome{Kind: KindRetry, Message: msg, Err: err, RetryAfter: se.RetryAfter}, nil
	case errors.As(err, &se) && se.ConnectionRequired != nil && se.ConnectionRequired.GetProvider() != "":
		// Pending input of the run or program (connect.go), not a failure.
		return Outcome{Kind: KindInput, Message: se.Message, Asked: connectAsked(se.ConnectionRequired)}, nil
	case errors.As(err, &se):
		return Outcome{Kind: KindRefused, Message: se.Message}, nil
	case err != nil:
		return Outcome{Kind: KindRetry, Message: noAnswer(err.Error()), Err: err}, nil
	case res.InputRequired != nil:
		return Outcome{Kind: KindInput, Message: "the tool asked its caller for input", Asked: askedOf(res.InputRequired), Duration: res.Duration}, nil
	case !res.Success:
		e := res.Error
		o := Outcome{Kind: KindExecution, Message: e.GetMessage(), Hint: e.GetAdditionalPromptContent(), Duration: res.Duration}
		if e.GetCanRetry() {
			o.Kind, o.ToolRetry, o.RetryAfter = KindRetry, true, time.Duration(e.GetRetryAfterMs())*time.Millisecond
		}
		return o, nil
	}
	return Outcome{Kind: KindOK, Value: res.Value, Duration: res.Duration}, nil
}

// noAnswer is the message of a call the gateway gave no answer to (it was
// not reached, or the connection broke mid-call): should the retries run out
// on it, the script or the run must not read it as "the call failed".
func noAnswer(cause string) string {
	return "the gateway gave no answer (" + cause + "), so whether the call ran is not known; a retry with the same call id gets its outcome from the gateway's record"
}

// ActivityError is the activity failure for an outcome that is not handed
// back: KindRetry becomes a retryable failure (after the tool's RetryAfter,
// or the gateway's for a call over a rate limit), KindConfig a non-retryable
// one. Other kinds return nil.
func (o Outcome) ActivityError() error {
	switch o.Kind {
	case KindRetry:
		if o.ToolRetry {
			return temporal.NewApplicationErrorWithOptions("the tool asked for a retry: "+o.Message, "ToolRetry",
				temporal.ApplicationErrorOptions{NextRetryDelay: o.RetryAfter})
		}
		if o.RetryAfter > 0 {
			// Temporal retries after the gateway's delay, not the policy's backoff.
			return temporal.NewApplicationErrorWithOptions(o.Message, ErrTypeRateLimited,
				temporal.ApplicationErrorOptions{NextRetryDelay: o.RetryAfter, Cause: o.Err})
		}
		return temporal.NewApplicationError(o.Message, "GatewayUnavailable", o.Err)
	case KindConfig:
		return temporal.NewNonRetryableApplicationError(o.Message, ErrTypeConfig, nil)
	}
	return nil
}

// Refusal maps a gateway error met while resolving tools: a transient one
// is retried, any other (unknown tool, no permission) is the caller's
// mistake and final.
func Refusal(what string, err error) error {
	var se *client.ServerError
	if errors.As(err, &se) && !Transient(se.Code) {
		return temporal.NewNonRetryableApplicationError(what+": "+se.Message, ErrTypeConfig, nil)
	}
	return fmt.Errorf("toolcall: %s: %w", what, err)
}

// FailureMessage is the message of an activity's or a child's failure
// without Temporal's wrapping: the innermost application error's message,
// "timed out (<kind>)" for a timeout, else the error's text.
func FailureMessage(err error) string {
	var app *temporal.ApplicationError
	if errors.As(err, &app) {
		return app.Message()
	}
	var to *temporal.TimeoutError
	if errors.As(err, &to) {
		return "timed out (" + to.TimeoutType().String() + ")"
	}
	return err.Error()
}
