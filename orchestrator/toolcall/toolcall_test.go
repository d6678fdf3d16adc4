package toolcall_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall"
	"github.com/toolfleet/toolfleet/sdk/client"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	canceled, cancel := context.WithCancel(t.Context())
	cancel()
	tests := []struct {
		name      string
		ctx       context.Context
		res       *client.Result
		err       error
		want      toolcall.Kind
		toolRetry bool
		wantErr   bool
	}{
		{"ok", t.Context(), &client.Result{Success: true, Value: structpb.NewNumberValue(3)}, nil, toolcall.KindOK, false, false},
		{"validation", t.Context(), nil, &client.ValidationError{Message: "bad", ParameterErrors: map[string]string{"a": "too big"}}, toolcall.KindValidation, false, false},
		{"execution", t.Context(), &client.Result{Error: &toolfleetv1.ToolError{Message: "no"}}, nil, toolcall.KindExecution, false, false},
		{"tool asks for a retry", t.Context(), &client.Result{Error: &toolfleetv1.ToolError{Message: "busy", CanRetry: true, RetryAfterMs: 250}}, nil, toolcall.KindRetry, true, false},
		{"unavailable", t.Context(), nil, &client.ServerError{Code: codes.Unavailable, Message: "down"}, toolcall.KindRetry, false, false},
		// A gateway that cut the call off on its way down: the call id makes a repeat safe.
		{"canceled by the gateway", t.Context(), nil, &client.ServerError{Code: codes.Canceled, Message: "shutting down"}, toolcall.KindRetry, false, false},
		{"no answer", t.Context(), nil, errors.New("connection refused"), toolcall.KindRetry, false, false},
		{"refused", t.Context(), nil, &client.ServerError{Code: codes.PermissionDenied, Message: "needs kv:write"}, toolcall.KindRefused, false, false},
		{"not found", t.Context(), nil, &client.ServerError{Code: codes.NotFound, Message: "no tool"}, toolcall.KindRefused, false, false},
		// A tool needing input the caller did not declare is refused; one
		// that asks hands its round back (KindInput, see question.go).
		{"tool needs input", t.Context(), nil, &client.ServerError{Code: codes.FailedPrecondition, Message: "it asks its caller for input (elicitation)"}, toolcall.KindRefused, false, false},
		{"tool asks for input", t.Context(), &client.Result{InputRequired: &toolfleetv1.InputRequired{RequestState: "s"}}, nil, toolcall.KindInput, false, false},
		{"orchestrator not authenticated", t.Context(), nil, &client.ServerError{Code: codes.Unauthenticated, Message: "token"}, toolcall.KindConfig, false, false},
		// The activity itself was cancelled: Temporal must see it, not a result.
		{"activity cancelled", canceled, nil, &client.ServerError{Code: codes.Canceled, Message: "canceled"}, "", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o, err := toolcall.Classify(tt.ctx, tt.res, tt.err)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if o.Kind != tt.want || o.ToolRetry != tt.toolRetry {
				t.Errorf("kind = %q (tool retry %v), want %q (%v)", o.Kind, o.ToolRetry, tt.want, tt.toolRetry)
			}
			if (o.Kind == toolcall.KindRetry || o.Kind == toolcall.KindConfig) != (o.ActivityError() != nil) {
				t.Errorf("ActivityError() = %v for kind %q", o.ActivityError(), o.Kind)
			}
		})
	}
}

func TestOptions(t *testing.T) {
	t.Parallel()
	opts, attempts := toolcall.Options(nil, toolcall.Standard)
	if opts.StartToCloseTimeout != toolcall.DefaultTimeout+toolcall.CallMargin || attempts != toolcall.DefaultAttempts ||
		opts.RetryPolicy.InitialInterval != time.Second || opts.RetryPolicy.MaximumInterval != 30*time.Second ||
		opts.HeartbeatTimeout != toolcall.HeartbeatTimeout {
		t.Errorf("defaults: %+v %+v attempts %d", opts, opts.RetryPolicy, attempts)
	}
	// The contract wins; a maximum backoff below the initial one is raised (Temporal refuses it).
	opts, attempts = toolcall.Options(&toolcall.Tool{Timeout: 3 * time.Second, MaxAttempts: 5,
		InitialBackoff: 2 * time.Second, MaxBackoff: time.Second}, toolcall.Standard)
	if opts.StartToCloseTimeout != 33*time.Second || attempts != 5 || opts.RetryPolicy.MaximumAttempts != 5 ||
		opts.RetryPolicy.InitialInterval != 2*time.Second || opts.RetryPolicy.MaximumInterval != 2*time.Second {
		t.Errorf("from the contract: %+v %+v attempts %d", opts, opts.RetryPolicy, attempts)
	}
}

func TestDenial(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		d       toolcall.Decision
		decided bool
		want    string
	}{
		{toolcall.Decision{}, false, "no decision within 1m0s"},
		{toolcall.Decision{Approver: "ana"}, true, "denied by ana"},
		{toolcall.Decision{Approver: "ana", Reason: "too risky"}, true, "denied by ana: too risky"},
	} {
		if got := toolcall.Denial(tt.d, tt.decided, time.Minute); got != tt.want {
			t.Errorf("Denial(%+v, %v) = %q, want %q", tt.d, tt.decided, got, tt.want)
		}
	}
}

// A call refused over a rate limit is retried by Temporal after the delay the
// gateway gave, not after the retry policy's backoff.
func TestRateLimitedRetriesAfterTheGatewaysDelay(t *testing.T) {
	t.Parallel()
	refused := &client.ServerError{Code: codes.ResourceExhausted, Message: "over the rate limit", RetryAfter: 1500 * time.Millisecond}
	o, err := toolcall.Classify(t.Context(), nil, refused)
	if err != nil || o.Kind != toolcall.KindRetry || o.ToolRetry || o.RetryAfter != refused.RetryAfter {
		t.Fatalf("outcome %+v, %v; want a retry after %s", o, err, refused.RetryAfter)
	}
	var app *temporal.ApplicationError
	if !errors.As(o.ActivityError(), &app) {
		t.Fatalf("activity error %v: not an application error", o.ActivityError())
	}
	if app.Type() != toolcall.ErrTypeRateLimited || app.NonRetryable() || app.NextRetryDelay() != refused.RetryAfter {
		t.Fatalf("type %s, non-retryable %v, next retry delay %s; want RateLimited, retryable, %s",
			app.Type(), app.NonRetryable(), app.NextRetryDelay(), refused.RetryAfter)
	}
	// Without a delay (the gateway was at a bound of its own) the policy's backoff applies.
	o, _ = toolcall.Classify(t.Context(), nil, &client.ServerError{Code: codes.ResourceExhausted, Message: "busy"})
	if errors.As(o.ActivityError(), &app) && app.NextRetryDelay() != 0 {
		t.Fatalf("next retry delay %s without a delay from the gateway", app.NextRetryDelay())
	}
}
