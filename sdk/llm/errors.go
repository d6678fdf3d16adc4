package llm

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

var (
	// ErrInvalidArguments matches every *ArgumentsError.
	ErrInvalidArguments = errors.New("llm: invalid tool-call arguments")
	// ErrMalformed is returned when a body, stream or text block does not
	// have the documented shape.
	ErrMalformed = errors.New("llm: malformed input")
	// ErrUnknownTool is returned when a model-facing name maps to no tool.
	ErrUnknownTool = errors.New("llm: unknown tool")
	// ErrNameCollision is returned when two tools share a model-facing name.
	ErrNameCollision = errors.New("llm: model-facing name collision")
	// ErrInvalidName is returned for names outside ^[a-zA-Z0-9_-]{1,64}$.
	ErrInvalidName = errors.New("llm: invalid model-facing name")
	// ErrRetryable matches an *APIError a caller may retry (408, 409, 429, 5xx).
	ErrRetryable = errors.New("llm: retryable provider error")
	// ErrPermanent matches an *APIError that retrying will not fix (other 4xx).
	ErrPermanent = errors.New("llm: permanent provider error")
	// ErrScriptExhausted is returned by a Scripted model with no turns left.
	ErrScriptExhausted = errors.New("llm: script exhausted")
)

// ArgumentsError says which call carried arguments that are neither a JSON
// object, a JSON string holding one, nor an empty string.
type ArgumentsError struct {
	Call string // model-facing tool name, and the id when known
	Err  error
}

func (e *ArgumentsError) Error() string {
	return fmt.Sprintf("llm: arguments of tool call %s: %v", e.Call, e.Err)
}

func (e *ArgumentsError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrInvalidArguments) true.
func (e *ArgumentsError) Is(target error) bool { return target == ErrInvalidArguments }

// APIError is a provider HTTP error, classified. errors.Is matches
// ErrRetryable or ErrPermanent.
type APIError struct {
	Provider   string
	StatusCode int
	// RetryAfter is the server's retry-after (or retry-after-ms) hint; 0 when absent.
	RetryAfter time.Duration
	Message    string
	// Err is the SDK's own error, kept for callers that need its details.
	Err error
}

func (e *APIError) Error() string {
	return fmt.Sprintf("llm: %s: HTTP %d: %s", e.Provider, e.StatusCode, e.Message)
}

func (e *APIError) Unwrap() error { return e.Err }

// Retryable reports whether the status is 408, 409, 429 or 5xx.
func (e *APIError) Retryable() bool { return RetryableStatus(e.StatusCode) }

// Is matches ErrRetryable or ErrPermanent by class.
func (e *APIError) Is(target error) bool {
	switch target {
	case ErrRetryable:
		return e.Retryable()
	case ErrPermanent:
		return !e.Retryable()
	}
	return false
}

// RetryableStatus reports whether an HTTP status is worth retrying.
func RetryableStatus(status int) bool {
	return status == http.StatusRequestTimeout || status == http.StatusConflict ||
		status == http.StatusTooManyRequests || status >= 500
}

// NewAPIError classifies an HTTP error response. header may be nil.
func NewAPIError(provider string, status int, header http.Header, message string, err error) *APIError {
	return &APIError{Provider: provider, StatusCode: status, RetryAfter: RetryAfter(header, time.Now()), Message: message, Err: err}
}

// RetryAfter reads retry-after-ms, then retry-after (seconds or an HTTP date).
func RetryAfter(h http.Header, now time.Time) time.Duration {
	if h == nil {
		return 0
	}
	if ms, err := strconv.ParseFloat(h.Get("Retry-After-Ms"), 64); err == nil && ms > 0 {
		return time.Duration(ms * float64(time.Millisecond))
	}
	v := h.Get("Retry-After")
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil && s > 0 {
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}
