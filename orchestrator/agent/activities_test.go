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
