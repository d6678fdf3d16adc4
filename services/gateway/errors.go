package gateway

import (
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/services/gateway/auth"
	"github.com/toolfleet/toolfleet/services/gateway/internal/codename"
	"github.com/toolfleet/toolfleet/services/gateway/registry"
)

// Sentinel errors wrapped by [CallError] values; match them with errors.Is.
var (
	// ErrUnknownTool: no served tool has the requested name or version.
	ErrUnknownTool = registry.ErrUnknownTool
	// ErrToolNotLoaded: the tool is not served yet and may be in a moment (the
	// gateway is starting, or a worker naming its toolkit is not loaded yet);
	// code Unavailable, retryable.
	ErrToolNotLoaded = registry.ErrToolNotLoaded
	// ErrUnauthenticated: the caller has no valid bearer token.
	ErrUnauthenticated = auth.ErrUnauthenticated
	// ErrPermissionDenied: the token lacks a scope the call needs.
	ErrPermissionDenied = auth.ErrPermissionDenied
	// ErrInvalidInput: the input broke the tool's contract.
	ErrInvalidInput = errors.New("gateway: invalid input")
	// ErrWorkerUnavailable: no replica of the tool could be reached.
	ErrWorkerUnavailable = errors.New("gateway: worker unavailable")
	// ErrDeadline: the tool did not answer within its timeout or the caller's deadline.
	ErrDeadline = errors.New("gateway: deadline exceeded")
	// ErrApprovalRequired: the tool's contract requires an approval the call lacks.
	ErrApprovalRequired = auth.ErrApprovalRequired
	// ErrIdempotency: the call_id cannot be honoured (used with another input, its
	// result was not kept, or the idempotency store is unreachable).
	ErrIdempotency = errors.New("gateway: call_id not usable")
	// ErrOutcomeUnknown: the call (or an earlier one with its call_id) may have
	// run: it started, then its worker or gateway went away or it was cut off.
	// It is not run again with the call_id. It wraps ErrIdempotency.
	ErrOutcomeUnknown = fmt.Errorf("%w: the call may have run", ErrIdempotency)
	// ErrRateLimited: the call is over one of the operator's rate limits or
	// quotas (CallError.RetryAfter says when to try again), or their shared
	// state is away and the gateway refuses until it is back.
	ErrRateLimited = errors.New("gateway: over a rate limit or quota")
	// ErrClientInput: the tool asks its caller for a kind of input the caller
	// cannot answer (CallToolRequest.client_input), or the call's request_state
	// or input answers are not valid for it.
	ErrClientInput = errors.New("gateway: client input")
)

// Failure kinds, as carried by call events and metrics.
const (
	KindServer     = "server"
	KindValidation = "validation"
	KindExecution  = "execution"
)

// CallError is a failure before the tool ran: a server error (Server set) or a
// validation error (Validation set, Code InvalidArgument). Execution errors are
// not CallErrors: they are responses with success=false.
type CallError struct {
	Code       codes.Code
	Server     *toolfleetv1.ServerError
	Validation *toolfleetv1.ValidationError
	// CallID is the call's id when one was assigned.
	CallID string
	// RetryAfter is when to try again (a call over a rate limit or quota);
	// it travels as a google.rpc.RetryInfo detail, CallFailure.retry_after_ms
	// and, on OXP HTTP, Retry-After.
	RetryAfter time.Duration
	// Connection says how to connect the account a tool acts with
	// (FailedPrecondition, ErrConnectionRequired); it travels as a status
	// detail next to Server and as CallFailure.connection_required.
	Connection *toolfleetv1.ConnectionRequired
	// ErrorID names an internal failure in the logs; the caller sees only it
	// and a generic message (see sealed).
	ErrorID string
	cause   error
	// detail is the raw text of an internal failure, for the logs only.
	detail string
}

// Error returns the caller-facing message.
func (e *CallError) Error() string {
	if e.Validation != nil {
		return e.Validation.GetMessage()
	}
	return e.Server.GetMessage()
}

// Unwrap returns the sentinel the error was built from.
func (e *CallError) Unwrap() error { return e.cause }

// Kind is KindValidation or KindServer.
func (e *CallError) Kind() string {
	if e.Validation != nil {
		return KindValidation
	}
	return KindServer
}

// serverError builds a server error; developer is for developers only. An
// internal failure (Internal, Unknown, DataLoss) is sealed: its developer text
// is raw Go error text, so it goes to the logs and the caller gets an error id.
func serverError(code codes.Code, cause error, developer, format string, args ...any) *CallError {
	ce := &CallError{Code: code, cause: cause, Server: &toolfleetv1.ServerError{
		Message: fmt.Sprintf(format, args...), DeveloperMessage: developer}}
	if internalCode(code) {
		ce.seal()
	}
	return ce
}

// internalCode reports the codes of the gateway's own failures.
func internalCode(c codes.Code) bool {
	return c == codes.Internal || c == codes.Unknown || c == codes.DataLoss
}

// seal replaces the developer text by an error id, keeping the text for logs.
func (e *CallError) seal() {
	e.ErrorID = newErrorID()
	e.detail = e.Server.GetDeveloperMessage()
	e.Server.Message += " (error id " + e.ErrorID + ")"
	e.Server.DeveloperMessage = "error id " + e.ErrorID + "; the gateway's logs have the details"
}

// newErrorID returns a short random id that names one failure in the logs.
func newErrorID() string { return newID()[:16] }

// notLoadedRetryAfter is the retry delay a caller gets with a tool that is not
// loaded yet (a registry warm-up lasts about two seconds).
const notLoadedRetryAfter = time.Second

// resolve finds the route of a tool reference in snap; an unknown tool is a
// server error (NotFound, or InvalidArgument for an over-long reference), and
// one the registry has not loaded yet (registry.ErrToolNotLoaded) Unavailable,
// with a retry delay.
func resolve(snap *registry.Snapshot, toolID string) (*registry.Route, *CallError) {
	rt, re := snap.Resolve(toolID)
	if re != nil {
		ce := serverError(re.Code, re.Unwrap(), re.Detail, "%s", re.Message)
		if re.Code == codes.Unavailable {
			ce.RetryAfter = notLoadedRetryAfter
		}
		return nil, ce
	}
	return rt, nil
}

func validationError(ve *toolfleetv1.ValidationError) *CallError {
	if ve.GetMessage() == "" {
		ve.Message = "the input does not match the tool's contract"
	}
	return &CallError{Code: codes.InvalidArgument, cause: ErrInvalidInput, Validation: ve}
}

// asCallError turns any pipeline error into a CallError (anything else becomes
// a sealed Internal server error: the caller sees an error id, never the text).
func asCallError(err error) *CallError {
	var ce *CallError
	if errors.As(err, &ce) {
		return ce
	}
	return serverError(codes.Internal, err, err.Error(), "the gateway failed to handle the call")
}

// GRPCStatus renders the error as a gRPC status with its detail.
func (e *CallError) GRPCStatus() *status.Status {
	st := status.New(e.Code, e.Error())
	var detail protoadapt.MessageV1 = e.Server
	if e.Validation != nil {
		detail = e.Validation
	}
	details := []protoadapt.MessageV1{detail}
	if e.Connection != nil {
		details = append(details, e.Connection)
	}
	if e.RetryAfter > 0 {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(e.RetryAfter)})
	}
	if withDetail, err := st.WithDetails(details...); err == nil {
		return withDetail
	}
	return st
}

// ConnectError renders the error for connect-go handlers.
func (e *CallError) ConnectError() *connect.Error {
	ce := connect.NewError(connect.Code(e.Code), errors.New(e.Error()))
	var d *connect.ErrorDetail
	var err error
	if e.Validation != nil {
		d, err = connect.NewErrorDetail(e.Validation)
	} else {
		d, err = connect.NewErrorDetail(e.Server)
	}
	if err == nil {
		ce.AddDetail(d)
	}
	if e.Connection != nil {
		if d, err := connect.NewErrorDetail(e.Connection); err == nil {
			ce.AddDetail(d)
		}
	}
	if e.RetryAfter > 0 {
		if d, err := connect.NewErrorDetail(&errdetails.RetryInfo{RetryDelay: durationpb.New(e.RetryAfter)}); err == nil {
			ce.AddDetail(d)
		}
	}
	return ce
}

// Failure renders the error as a CallTools outcome.
func (e *CallError) Failure() *toolfleetv1.CallFailure {
	f := &toolfleetv1.CallFailure{Code: codeName(e.Code), CallId: e.CallID, RetryAfterMs: retryMs(e.RetryAfter), ConnectionRequired: e.Connection}
	if e.Validation != nil {
		f.Detail = &toolfleetv1.CallFailure_ValidationError{ValidationError: e.Validation}
	} else {
		f.Detail = &toolfleetv1.CallFailure_ServerError{ServerError: e.Server}
	}
	return f
}

// retryMs is d in whole milliseconds, rounded up (a delay is never shortened).
func retryMs(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// codeName is the canonical upper-case name of a code, e.g. "NOT_FOUND".
func codeName(c codes.Code) string { return codename.Of(c) }

// CodeOf returns the gRPC code of a pipeline error: OK for nil, the CallError's
// code, or Internal for anything else.
func CodeOf(err error) codes.Code {
	if err == nil {
		return codes.OK
	}
	return asCallError(err).Code
}
