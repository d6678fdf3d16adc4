package agent

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/toolfleet/toolfleet/sdk/llm"
)

func TestModelError(t *testing.T) {
	t.Parallel()
	h := http.Header{}
	h.Set("Retry-After", "7")
	tests := []struct {
		name         string
		err          error
		nonRetryable bool
		delay        time.Duration
	}{
		{"rate limited with retry-after", llm.NewAPIError("openai", 429, h, "slow down", nil), false, 7 * time.Second},
		{"server error", llm.NewAPIError("anthropic", 503, http.Header{}, "overloaded", nil), false, 0},
		{"bad request", llm.NewAPIError("gemini", 400, http.Header{}, "bad schema", nil), true, 0},
		{"script exhausted", llm.ErrScriptExhausted, true, 0},
		{"redirect refused", &llm.RedirectError{StatusCode: 307, Host: "other.example:8443"}, true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var app *temporal.ApplicationError
			if err := modelError(context.Background(), tt.err); !errors.As(err, &app) {
				t.Fatalf("modelError = %v, want an application error", err)
			}
			if app.NonRetryable() != tt.nonRetryable || app.NextRetryDelay() != tt.delay {
				t.Fatalf("non-retryable %v, next delay %s; want %v, %s", app.NonRetryable(), app.NextRetryDelay(), tt.nonRetryable, tt.delay)
			}
		})
	}
}

// TestModelErrorQuotesNoProviderMessage: a provider's error message is
// whatever the server at the run's base URL sent; the run's failure names
// the provider, the status and a code-like error code only.
func TestModelErrorQuotesNoProviderMessage(t *testing.T) {
	t.Parallel()
	const marker = "upstream-private-marker"
	tests := []struct {
		err  *llm.APIError
		want string
	}{
		{llm.NewAPIError("anthropic", 400, nil, "<html>"+marker+"</html>", nil), "model: anthropic: HTTP 400 Bad Request"},
		{&llm.APIError{Provider: "openai", StatusCode: 429, Code: "insufficient_quota", Message: marker}, "model: openai: HTTP 429 Too Many Requests (insufficient_quota)"},
		{&llm.APIError{Provider: "gemini", StatusCode: 503, Code: "a " + marker, Message: marker}, "model: gemini: HTTP 503 Service Unavailable"},
		{&llm.APIError{Provider: "anthropic", StatusCode: 529, Code: "overloaded_error", Message: marker}, "model: anthropic: HTTP 529 (overloaded_error)"},
	}
	for _, tt := range tests {
		var app *temporal.ApplicationError
		if err := modelError(context.Background(), tt.err); !errors.As(err, &app) {
			t.Fatalf("modelError = %v, want an application error", err)
		}
		if app.Message() != tt.want {
			t.Errorf("message %q, want %q", app.Message(), tt.want)
		}
	}
}
