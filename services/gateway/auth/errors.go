package auth

import (
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
)

// Sentinels wrapped by [Error]; match them with errors.Is.
var (
	// ErrUnauthenticated: the caller has no valid bearer token.
	ErrUnauthenticated = errors.New("gateway: unauthenticated")
	// ErrPermissionDenied: the principal lacks a scope the call needs.
	ErrPermissionDenied = errors.New("gateway: permission denied")
	// ErrApprovalRequired: the tool's contract requires an approval the call lacks.
	ErrApprovalRequired = errors.New("gateway: approval required")
	// ErrBadDelegation: the delegation metadata is incomplete.
	ErrBadDelegation = errors.New("gateway: bad delegation metadata")
)

// Error is a refusal: Code and Message are for the caller, Developer for logs
// and developers (never for a model).
type Error struct {
	Code      codes.Code
	Message   string
	Developer string
	sentinel  error
}

func (e *Error) Error() string { return e.Message }

// Unwrap returns the sentinel the error was built from.
func (e *Error) Unwrap() error { return e.sentinel }

func refuse(code codes.Code, sentinel error, developer, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), Developer: developer, sentinel: sentinel}
}
