package llm

import (
	"context"
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
	// Code is the provider's error type when it sent one
	// ("overloaded_error", "rate_limit_exceeded", "throttlingException").
	// Errors that arrive inside a streamed 200 response carry it, with
	// StatusCode set to the HTTP status the provider documents for it.
	Code string
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

// Retryable reports whether retrying may help: the status is 408, 409,
// 429 or 5xx, except for codes that say otherwise (an exhausted quota is a
// 429 that no retry fixes; Bedrock's modelStreamErrorException is a 424 its
// docs say to retry).
func (e *APIError) Retryable() bool {
	if v, ok := retryableCodes[e.Code]; ok {
		return v
	}
	return RetryableStatus(e.StatusCode)
}

var retryableCodes = map[string]bool{
	"insufficient_quota":        false,
	"billing_error":             false,
	"modelStreamErrorException": true,
	"modelNotReadyException":    true,
}

// streamErrorStatus is the HTTP status each provider documents for an
// error type, used for errors sent inside a streamed response.
var streamErrorStatus = map[string]int{
	// Anthropic
	"invalid_request_error": 400, "authentication_error": 401, "billing_error": 402,
	"permission_error": 403, "not_found_error": 404, "request_too_large": 413,
	"rate_limit_error": 429, "api_error": 500, "timeout_error": 504, "overloaded_error": 529,
	// OpenAI
	"rate_limit_exceeded": 429, "insufficient_quota": 429, "server_error": 500,
	"invalid_prompt": 400, "vector_store_timeout": 504,
	// Bedrock
	"validationException": 400, "accessDeniedException": 403, "resourceNotFoundException": 404,
	"modelTimeoutException": 408, "modelStreamErrorException": 424, "modelErrorException": 424,
	"throttlingException": 429, "modelNotReadyException": 429, "serviceQuotaExceededException": 400,
	"internalServerException": 500, "serviceUnavailableException": 503,
}

// NewStreamError classifies an error a provider sent inside a streamed
// response (after HTTP 200), by its error type code. An unknown code
// counts as a server error (500): the request itself had been accepted.
func NewStreamError(provider, code, message string) *APIError {
	status, ok := streamErrorStatus[code]
	if !ok {
		status = http.StatusInternalServerError
	}
	if message == "" {
		message = code
	}
	return &APIError{Provider: provider, StatusCode: status, Code: code, Message: message}
}

// Retryable classifies any error a Model returned, for a caller that
// retries on its own schedule (the orchestrator's activity policy): retry
// reports whether another attempt may succeed, after is the provider's
// retry-after (0 when it gave none).
//
//   - an *APIError: by its status and code, with its RetryAfter;
//   - ctx done: false, the caller gave up (a deadline while ctx is still
//     live is the client's own request timeout: true);
//   - ErrMalformed, ErrInvalidArguments, ErrUnknownTool, ErrSpec,
//     ErrScriptExhausted, ErrRedirect: false, the same request would fail
//     the same way;
//   - anything else (connection refused or reset, a stream cut short): true.
func Retryable(ctx context.Context, err error) (retry bool, after time.Duration) {
	if err == nil {
		return false, 0
	}
	var apiErr *APIError
	if errors.As(err, &apiErr) {
		return apiErr.Retryable(), apiErr.RetryAfter
	}
	if ctx.Err() != nil || errors.Is(err, context.Canceled) {
		return false, 0
	}
	for _, permanent := range []error{ErrRedirect, ErrMalformed, ErrInvalidArguments, ErrUnknownTool, ErrSpec, ErrScriptExhausted, ErrNameCollision, ErrInvalidName} {
		if errors.Is(err, permanent) {
			return false, 0
		}
	}
	return true, 0
}

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
