package client

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// ServerError is a failure before the tool ran: unknown tool or version, missing
// or insufficient credentials, no worker reachable, deadline. Match it with
// errors.As; Code tells the cases apart (codes.NotFound for an unknown tool,
// Unauthenticated, PermissionDenied, Unavailable, DeadlineExceeded, …).
type ServerError struct {
	// Code is the gRPC status code.
	Code codes.Code
	// Message is for users and models.
	Message string
	// DeveloperMessage is for developers only; never show it to a model.
	DeveloperMessage string
	// CallID is the id of the call that failed.
	CallID string
	// RetryAfter is how long the gateway asked the caller to wait before
	// trying again (google.rpc.RetryInfo): a call over a rate limit or quota
	// (codes.ResourceExhausted). [Client.CallTool] waits it and retries.
	RetryAfter time.Duration
	// Answered is true when the gateway itself answered with this error (it
	// carries the gateway's detail). When false, the gateway was not reached or
	// the connection broke mid-call: whether the call ran is not known, and a
	// retry with the same call_id gets its outcome from the gateway's record.
	Answered bool
	// ConnectionRequired is set when the tool acts with the caller's own
	// account at a provider the caller has not connected
	// (codes.FailedPrecondition): open its AuthorizationUrl in a browser,
	// then call again with the same call_id (docs/credentials.md).
	ConnectionRequired *toolfleetv1.ConnectionRequired

	cause error
}

// Error returns the code and the message.
func (e *ServerError) Error() string {
	return fmt.Sprintf("server error %s: %s", e.Code, e.Message)
}

// Unwrap returns context.Canceled or context.DeadlineExceeded when the call
// ended because the caller's context did (the client's default timeout
// included), so errors.Is works as usual.
func (e *ServerError) Unwrap() error { return e.cause }

// GRPCStatus renders the error as the gateway sends it: the code with a
// toolfleetv1.ServerError detail.
func (e *ServerError) GRPCStatus() *status.Status {
	st := status.New(e.Code, e.Message)
	details := []protoadapt.MessageV1{&toolfleetv1.ServerError{Message: e.Message, DeveloperMessage: e.DeveloperMessage}}
	if e.RetryAfter > 0 {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(e.RetryAfter)})
	}
	if e.ConnectionRequired != nil {
		details = append(details, e.ConnectionRequired)
	}
	if d, err := st.WithDetails(details...); err == nil {
		return d
	}
	return st
}

// ValidationError says the input broke the tool's contract; the tool did not run.
type ValidationError struct {
	// Message summarises the problem.
	Message string
	// ParameterErrors maps a JSON field path (e.g. "items[2].name") to a message a
	// model can act on.
	ParameterErrors map[string]string
	// CallID is the id of the call that failed.
	CallID string
}

// Error returns the message and the field errors it does not already name,
// sorted by field. (The gateway's message lists every field error, so each is
// said once.)
func (e *ValidationError) Error() string {
	var b strings.Builder
	b.WriteString(invalidInput(e.Message))
	for _, f := range e.unnamed() {
		fmt.Fprintf(&b, "; %s: %s", f, e.ParameterErrors[f])
	}
	return b.String()
}

// Text renders the error for a model or a terminal: a headline, then one
// "- field: message" line per field error, sorted by field, each said once.
// The headline is "invalid input:" when the message only lists the field
// errors (as the gateway's does), else the message.
func (e *ValidationError) Text() string {
	var b strings.Builder
	rest := e.Message
	for f, m := range e.ParameterErrors {
		rest = strings.ReplaceAll(rest, f+": "+m, "")
	}
	fields := e.unnamed()
	if len(e.ParameterErrors) > 0 && strings.Trim(strings.TrimPrefix(strings.TrimSpace(rest), "invalid input"), " :;") == "" {
		b.WriteString("invalid input:")
		fields = slices.Sorted(maps.Keys(e.ParameterErrors))
	} else {
		b.WriteString(invalidInput(e.Message))
	}
	for _, f := range fields {
		fmt.Fprintf(&b, "\n- %s: %s", f, e.ParameterErrors[f])
	}
	return b.String()
}

// unnamed returns the fields whose error the message does not state, sorted.
func (e *ValidationError) unnamed() []string {
	var out []string
	for _, f := range slices.Sorted(maps.Keys(e.ParameterErrors)) {
		if !strings.Contains(e.Message, f+": "+e.ParameterErrors[f]) {
			out = append(out, f)
		}
	}
	return out
}

// GRPCStatus renders the error as the gateway sends it: InvalidArgument with a
// toolfleetv1.ValidationError detail.
func (e *ValidationError) GRPCStatus() *status.Status {
	st := status.New(codes.InvalidArgument, e.Message)
	if d, err := st.WithDetails(&toolfleetv1.ValidationError{Message: e.Message, ParameterErrors: e.ParameterErrors}); err == nil {
		return d
	}
	return st
}

// invalidInput says "invalid input" once, whether or not msg already does.
func invalidInput(msg string) string {
	if strings.HasPrefix(msg, "invalid input") {
		return msg
	}
	if msg == "" {
		return "invalid input"
	}
	return "invalid input: " + msg
}

// ExecutionError is an execution error (the tool ran and failed) as a Go error,
// returned by [Result.Err]. The call itself succeeded: the gateway answered
// with success=false.
type ExecutionError struct {
	// ToolID is the resolved tool id, e.g. "Calculator.Divide@1.0.0".
	ToolID string
	// CallID is the call's id.
	CallID string
	// Message is for users and models.
	Message string
	// DeveloperMessage is for developers only; never show it to a model.
	DeveloperMessage string
	// CanRetry says a retry with the same input may succeed.
	CanRetry bool
	// RetryAfter is the delay the tool suggested before a retry.
	RetryAfter time.Duration
	// AdditionalPromptContent is guidance for a model, e.g. how to fix the input.
	AdditionalPromptContent string
}

// Error returns the tool id and the message.
func (e *ExecutionError) Error() string {
	return fmt.Sprintf("%s failed: %s", e.ToolID, e.Message)
}

// fromRPC turns a transport error into a *ServerError or *ValidationError,
// reading the toolfleet detail the gateway attached. Errors without a
// detail (the gateway was not reached, a deadline) keep their code.
func fromRPC(ctx context.Context, err error, callID string) error {
	if err == nil {
		return nil
	}
	code := codes.Unknown
	msg := err.Error()
	var details []any
	var cerr *connect.Error
	switch {
	case errors.As(err, &cerr):
		code, msg = codes.Code(cerr.Code()), cerr.Message()
		for _, d := range cerr.Details() {
			if v, derr := d.Value(); derr == nil {
				details = append(details, v)
			}
		}
	default:
		if st, ok := status.FromError(err); ok {
			code, msg, details = st.Code(), st.Message(), st.Details()
		}
	}
	se := &ServerError{Code: code, Message: msg, CallID: callID, cause: ctxCause(ctx, code)}
	for _, d := range details {
		switch d := d.(type) {
		case *toolfleetv1.ValidationError:
			return &ValidationError{Message: d.GetMessage(), ParameterErrors: d.GetParameterErrors(), CallID: callID}
		case *toolfleetv1.ServerError:
			se.Message, se.DeveloperMessage, se.Answered = d.GetMessage(), d.GetDeveloperMessage(), true
		case *errdetails.RetryInfo:
			se.RetryAfter, se.Answered = max(d.GetRetryDelay().AsDuration(), 0), true
		case *toolfleetv1.ConnectionRequired:
			se.ConnectionRequired, se.Answered = d, true
		}
	}
	return se
}

// deadlineSkew is how early the gateway may see the caller's propagated
// deadline pass (its clock and the network are a little ahead of ours).
const deadlineSkew = 250 * time.Millisecond

// ctxCause is the caller's context error behind a Canceled or
// DeadlineExceeded code: the context's error, or DeadlineExceeded when the
// gateway answered just before the caller's own deadline passed; nil when the
// context is live and far from its deadline (e.g. the tool's own timeout).
func ctxCause(ctx context.Context, code codes.Code) error {
	if code != codes.Canceled && code != codes.DeadlineExceeded {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && code == codes.DeadlineExceeded && time.Until(dl) < deadlineSkew {
		return context.DeadlineExceeded
	}
	return nil
}

// fromFailure turns a CallTools failure outcome into a typed error.
func fromFailure(f *toolfleetv1.CallFailure) error {
	if ve := f.GetValidationError(); ve != nil {
		return &ValidationError{Message: ve.GetMessage(), ParameterErrors: ve.GetParameterErrors(), CallID: f.GetCallId()}
	}
	code := codeOfName(f.GetCode())
	se := f.GetServerError()
	return &ServerError{Code: code, Message: se.GetMessage(), DeveloperMessage: se.GetDeveloperMessage(), CallID: f.GetCallId(),
		RetryAfter: time.Duration(max(f.GetRetryAfterMs(), 0)) * time.Millisecond, ConnectionRequired: f.GetConnectionRequired()}
}

// codeOfName maps a canonical code name ("NOT_FOUND") to its code.
func codeOfName(name string) codes.Code {
	var c codes.Code
	if err := c.UnmarshalJSON([]byte(strconv.Quote(name))); err != nil {
		return codes.Unknown
	}
	return c
}
