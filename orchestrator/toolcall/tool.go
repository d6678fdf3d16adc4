package toolcall

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// Tool is what a workflow needs to know of a tool to schedule a call: its
// identity, its behaviour hints and the timeouts and retries of its contract.
// It travels in history; the JSON names are those of the histories recorded
// before this package existed.
type Tool struct {
	// ID is the fully qualified id "Toolkit.Tool@x.y.z".
	ID string `json:"id"`
	// ModelName is the name a model (or a program's stub) calls it by.
	ModelName        string        `json:"model_name"`
	ReadOnly         bool          `json:"read_only,omitempty"`
	Idempotent       bool          `json:"idempotent,omitempty"`
	RequiresApproval bool          `json:"requires_approval,omitempty"`
	Timeout          time.Duration `json:"timeout,omitempty"`
	MaxAttempts      int           `json:"max_attempts,omitempty"`
	InitialBackoff   time.Duration `json:"initial_backoff,omitempty"`
	MaxBackoff       time.Duration `json:"max_backoff,omitempty"`
}

// ToolOf summarizes a tool definition.
func ToolOf(d *toolfleetv1.ToolDefinition) Tool {
	t := Tool{ID: d.GetId(), ModelName: d.GetModelName(), ReadOnly: d.GetHints().GetReadOnly(),
		Idempotent: d.GetHints().GetIdempotent(), RequiresApproval: d.GetRequirements().GetRequiresApproval(),
		Timeout: d.GetRequirements().GetTimeout().AsDuration()}
	if r := d.GetRequirements().GetRetry(); r != nil {
		t.MaxAttempts = int(r.GetMaxAttempts())
		t.InitialBackoff = r.GetInitialBackoff().AsDuration()
		t.MaxBackoff = r.GetMaxBackoff().AsDuration()
	}
	return t
}

// NeedsApproval reports whether a call of t waits for a decision: its
// contract asks for one, or the workflow's approval policy does
// ([PolicyNeedsApproval]).
func (t Tool) NeedsApproval(policy []string) bool {
	return t.RequiresApproval || PolicyNeedsApproval(policy, t.ID)
}

// Defaults of a call activity for a tool whose contract leaves them unset.
//
// The gateway applies the tool's own timeout (its default is 30 s); the
// activity's start-to-close timeout is that timeout plus [CallMargin] for the
// hop, or [DefaultTimeout] plus the margin when the contract sets none. A dead
// orchestrator is noticed through the heartbeat ([HeartbeatTimeout]), not the
// start-to-close timeout. Three attempts, backing off from 1 s to at most
// 30 s: a gateway that restarts is waited for, a tool that asked for a retry
// gets the delay it asked for (Temporal's NextRetryDelay).
const (
	DefaultTimeout        = time.Minute
	CallMargin            = 30 * time.Second
	DefaultAttempts       = 3
	DefaultInitialBackoff = time.Second
	DefaultMaxBackoff     = 30 * time.Second
	// HeartbeatTimeout is how soon Temporal retries an attempt whose worker died.
	HeartbeatTimeout = 10 * time.Second
)

// Error types of non-retryable activity failures, shared by both engines.
const (
	// ErrTypeConfig: the run or program is configured wrong (an unknown tool,
	// a missing scope, an orchestrator the gateway does not authenticate).
	ErrTypeConfig = "ConfigError"
	// ErrTypeInput: a call's input cannot be sent at all.
	ErrTypeInput = "InvalidInput"
	// ErrTypeRateLimited: the gateway refused the call over a rate limit or
	// quota; the activity is retried after the delay the gateway gave.
	ErrTypeRateLimited = "RateLimited"
)

// Defaults are the values [Options] uses where a tool's contract sets none.
// [Standard] is the one default of both engines; the values workflows
// recorded before it existed are kept by their packages for replay.
type Defaults struct {
	// Timeout applies when the contract sets none; the margin is added to it.
	Timeout, Margin            time.Duration
	Attempts                   int
	InitialBackoff, MaxBackoff time.Duration
}

// Standard are the documented defaults (see the constants above).
var Standard = Defaults{Timeout: DefaultTimeout, Margin: CallMargin, Attempts: DefaultAttempts,
	InitialBackoff: DefaultInitialBackoff, MaxBackoff: DefaultMaxBackoff}

// OptionsChangeID is the workflow.GetVersion change id under which a
// workflow uses [Standard] (version 1) instead of its own former defaults.
const OptionsChangeID = "toolcall-options"

// Options builds the call activity's options from t's contract (nil t: a
// call that names no tool, with the defaults) and returns the attempts they
// allow, so the last attempt can turn a retryable failure into a result.
func Options(t *Tool, d Defaults) (workflow.ActivityOptions, int) {
	timeout, attempts, initial, maxBackoff := d.Timeout, d.Attempts, d.InitialBackoff, d.MaxBackoff
	if t != nil {
		if t.Timeout > 0 {
			timeout = t.Timeout
		}
		if t.MaxAttempts > 0 {
			attempts = t.MaxAttempts
		}
		if t.InitialBackoff > 0 {
			initial = t.InitialBackoff
		}
		if t.MaxBackoff > 0 {
			maxBackoff = t.MaxBackoff
		}
	}
	// Temporal refuses a maximum interval below the initial one.
	maxBackoff = max(maxBackoff, initial)
	return workflow.ActivityOptions{
		StartToCloseTimeout: timeout + d.Margin,
		HeartbeatTimeout:    HeartbeatTimeout,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: initial, BackoffCoefficient: 2, MaximumInterval: maxBackoff,
			MaximumAttempts: int32(attempts), NonRetryableErrorTypes: []string{ErrTypeConfig, ErrTypeInput}},
	}, attempts
}
