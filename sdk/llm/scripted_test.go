// Tests that drive models with the scripted model of sdk/llm/llmtest (an
// external test package: llmtest imports llm).
package llm_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/llmtest"
)

func TestScriptedExhausted(t *testing.T) {
	t.Parallel()
	m := llmtest.NewScripted(llmtest.SayText("only"))
	if _, err := m.Complete(t.Context(), &llm.Request{}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Complete(t.Context(), &llm.Request{}); !errors.Is(err, llm.ErrScriptExhausted) {
		t.Fatalf("err = %v, want ErrScriptExhausted", err)
	}
}

func TestWithRetry(t *testing.T) {
	t.Parallel()
	rateLimited := &llm.APIError{Provider: "test", StatusCode: 429, RetryAfter: 20 * time.Millisecond}
	badRequest := &llm.APIError{Provider: "test", StatusCode: 400}
	tests := []struct {
		name      string
		turns     []llmtest.ScriptTurn
		policy    llm.RetryPolicy
		wantErr   error
		wantCalls int
		minWait   time.Duration
	}{
		{"retries 429 honouring retry-after", []llmtest.ScriptTurn{{Err: rateLimited}, {Err: rateLimited}, llmtest.SayText("ok")}, llm.RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Millisecond}, nil, 3, 40 * time.Millisecond},
		{"gives up after attempts", []llmtest.ScriptTurn{{Err: rateLimited}, {Err: rateLimited}, llmtest.SayText("ok")}, llm.RetryPolicy{MaxAttempts: 2, InitialBackoff: time.Millisecond}, llm.ErrRetryable, 2, 0},
		{"does not retry 400", []llmtest.ScriptTurn{{Err: badRequest}, llmtest.SayText("ok")}, llm.RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Millisecond}, llm.ErrPermanent, 1, 0},
		{"caps the wait", []llmtest.ScriptTurn{{Err: &llm.APIError{StatusCode: 503, RetryAfter: time.Hour}}, llmtest.SayText("ok")}, llm.RetryPolicy{MaxAttempts: 2, MaxBackoff: 5 * time.Millisecond}, nil, 2, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := llmtest.NewScripted(tt.turns...)
			start := time.Now()
			_, err := llm.WithRetry(s, tt.policy).Complete(t.Context(), &llm.Request{})
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if n := len(s.Requests()); n != tt.wantCalls {
				t.Errorf("calls = %d, want %d", n, tt.wantCalls)
			}
			if waited := time.Since(start); waited < tt.minWait {
				t.Errorf("waited %v, want at least %v", waited, tt.minWait)
			}
		})
	}
}

func TestWithRetryStopsOnContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	s := llmtest.NewScripted(llmtest.ScriptTurn{Err: &llm.APIError{StatusCode: 429, RetryAfter: time.Minute}}, llmtest.SayText("late"))
	start := time.Now()
	_, err := llm.WithRetry(s, llm.RetryPolicy{MaxAttempts: 2, MaxBackoff: time.Minute}).Complete(ctx, &llm.Request{})
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, llm.ErrRetryable) {
		t.Fatalf("err = %v", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Error("wait did not end with the context")
	}
}
