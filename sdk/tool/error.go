package tool

import (
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// ExecutionErrorCode is the gRPC code an execution error travels with. Callers tell
// execution errors apart by the toolfleetv1.ToolError detail, not by the code.
const ExecutionErrorCode = codes.Unknown

// Error is an execution error: the tool ran and failed. Build it with [NewError].
// It implements the grpc-go status interface, so a handler returns it as is.
type Error struct {
	detail *toolfleetv1.ToolError
}

// ErrorOption configures an [Error].
type ErrorOption func(*toolfleetv1.ToolError)

// NewError returns an execution error whose message is shown to the model, so it
// should say what went wrong and how to do better. It travels as a gRPC status with
// code [ExecutionErrorCode] and a toolfleetv1.ToolError detail.
func NewError(message string, opts ...ErrorOption) error {
	d := &toolfleetv1.ToolError{Message: message}
	for _, o := range opts {
		o(d)
	}
	return &Error{detail: d}
}

// WithDeveloperMessage adds details for developers; they are logged and returned to
// callers but never shown to a model.
func WithDeveloperMessage(msg string) ErrorOption {
	return func(d *toolfleetv1.ToolError) { d.DeveloperMessage = msg }
}

// WithRetry marks the error as retryable after the given delay (0 = at the caller's
// discretion).
func WithRetry(after time.Duration) ErrorOption {
	return func(d *toolfleetv1.ToolError) {
		d.CanRetry = true
		d.RetryAfterMs = after.Milliseconds()
	}
}

// WithPromptHint adds guidance for the model, e.g. how to fix the input.
func WithPromptHint(hint string) ErrorOption {
	return func(d *toolfleetv1.ToolError) { d.AdditionalPromptContent = hint }
}

// Error returns the model-facing message.
func (e *Error) Error() string { return e.detail.GetMessage() }

// Detail returns the error as a toolfleetv1.ToolError. The caller must not modify it.
func (e *Error) Detail() *toolfleetv1.ToolError { return e.detail }

// GRPCStatus makes grpc-go send the error as a status with the ToolError detail.
func (e *Error) GRPCStatus() *status.Status {
	st := status.New(ExecutionErrorCode, e.detail.GetMessage())
	withDetail, err := st.WithDetails(e.detail)
	if err != nil {
		return st // only fails for a nil detail; the message still arrives
	}
	return withDetail
}

// AsToolError extracts an execution error from err: either an [*Error] (worker side)
// or a gRPC status carrying a toolfleetv1.ToolError detail (caller side).
func AsToolError(err error) (*toolfleetv1.ToolError, bool) {
	if err == nil {
		return nil, false
	}
	var te *Error
	if errors.As(err, &te) {
		return te.detail, true
	}
	st, ok := status.FromError(err)
	if !ok {
		return nil, false
	}
	for _, d := range st.Details() {
		if v, ok := d.(*toolfleetv1.ToolError); ok {
			return v, true
		}
	}
	return nil, false
}

// AsValidationError extracts the toolfleetv1.ValidationError detail of an
// InvalidArgument status returned by a worker.
func AsValidationError(err error) (*toolfleetv1.ValidationError, bool) {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.InvalidArgument {
		return nil, false
	}
	for _, d := range st.Details() {
		if v, ok := d.(*toolfleetv1.ValidationError); ok {
			return v, true
		}
	}
	return nil, false
}

// ValidationStatus returns ve as the error a worker sends for invalid input: code
// InvalidArgument with ve as a detail. [AsValidationError] reverses it.
func ValidationStatus(ve *toolfleetv1.ValidationError) error {
	st := status.New(codes.InvalidArgument, ve.GetMessage())
	if withDetail, err := st.WithDetails(ve); err == nil {
		st = withDetail
	}
	return st.Err()
}
