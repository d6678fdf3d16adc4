package llm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"
	"testing"
	"time"
)

func TestRetryable(t *testing.T) {
	t.Parallel()
	done, cancel := context.WithCancel(t.Context())
	cancel()
	tests := []struct {
		name      string
		ctx       context.Context
		err       error
		retry     bool
		wantAfter time.Duration
	}{
		{"429 with retry-after", t.Context(), fmt.Errorf("turn: %w", &APIError{Provider: "openai", StatusCode: 429, RetryAfter: 7 * time.Second}), true, 7 * time.Second},
		{"401", t.Context(), &APIError{Provider: "anthropic", StatusCode: 401}, false, 0},
		{"connection reset", t.Context(), fmt.Errorf("post: %w", syscall.ECONNRESET), true, 0},
		{"stream cut short", t.Context(), fmt.Errorf("llm: read stream: %w", io.ErrUnexpectedEOF), true, 0},
		{"client's own timeout", t.Context(), fmt.Errorf("post: %w", context.DeadlineExceeded), true, 0},
		{"caller gave up", done, fmt.Errorf("post: %w", context.Canceled), false, 0},
		{"malformed reply", t.Context(), fmt.Errorf("%w: openai response: %v", ErrMalformed, errors.New("no choices")), false, 0},
		{"bad arguments", t.Context(), &ArgumentsError{Call: "A (c1)", Err: errors.New("x")}, false, 0},
		{"bad spec", t.Context(), fmt.Errorf("open: %w", ErrSpec), false, 0},
		{"nil", t.Context(), nil, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			retry, after := Retryable(tt.ctx, tt.err)
			if retry != tt.retry || after != tt.wantAfter {
				t.Errorf("Retryable = %v, %v; want %v, %v", retry, after, tt.retry, tt.wantAfter)
			}
		})
	}
}
