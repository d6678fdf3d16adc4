package llm

import (
	"context"
	"errors"
	"time"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/retry"
)

// Model is a language model that can call tools.
type Model interface {
	// Complete sends req and returns the assistant's turn.
	Complete(ctx context.Context, req *Request) (*toolfleetv1.Message, error)
	// Stream sends req, calls onDelta (may be nil) for every delta as it
	// arrives and returns the assembled turn. An onDelta error ends the
	// stream and is returned, except StopStream, which ends it early and
	// still returns what was assembled.
	Stream(ctx context.Context, req *Request, onDelta func(Delta) error) (*toolfleetv1.Message, error)
}

// RetryPolicy says how WithRetry retries errors that match ErrRetryable: the
// one jittered-backoff policy of package retry, shared with sdk/client.
type RetryPolicy = retry.Policy

// Defaults of WithRetry where the policy leaves a field zero: providers ask for
// longer waits than tools do.
const (
	DefaultRetryBackoff = 500 * time.Millisecond
	DefaultRetryMaxWait = 30 * time.Second
)

// WithRetry retries Complete, and Stream until its first delta, on
// retryable provider errors (408, 409, 429, 5xx), waiting the server's
// retry-after when it sent one (capped by MaxBackoff), else a jittered
// exponential backoff. Waits end early when ctx is done. Zero fields default to
// 3 attempts, [DefaultRetryBackoff] and [DefaultRetryMaxWait].
func WithRetry(m Model, p RetryPolicy) Model {
	p = p.Or(RetryPolicy{InitialBackoff: DefaultRetryBackoff, MaxBackoff: DefaultRetryMaxWait}).WithDefaults()
	return &retryModel{m: m, p: p}
}

type retryModel struct {
	m Model
	p RetryPolicy
}

func (r *retryModel) Complete(ctx context.Context, req *Request) (*toolfleetv1.Message, error) {
	return r.do(ctx, func() (*toolfleetv1.Message, bool, error) {
		msg, err := r.m.Complete(ctx, req)
		return msg, true, err
	})
}

func (r *retryModel) Stream(ctx context.Context, req *Request, onDelta func(Delta) error) (*toolfleetv1.Message, error) {
	return r.do(ctx, func() (*toolfleetv1.Message, bool, error) {
		started := false
		msg, err := r.m.Stream(ctx, req, func(d Delta) error {
			started = true
			if onDelta == nil {
				return nil
			}
			return onDelta(d)
		})
		// Once deltas reached the caller a retry would repeat them.
		return msg, !started, err
	})
}

func (r *retryModel) do(ctx context.Context, try func() (*toolfleetv1.Message, bool, error)) (*toolfleetv1.Message, error) {
	b := r.p.Backoff()
	for {
		msg, retryable, err := try()
		if err == nil || !retryable || !errors.Is(err, ErrRetryable) {
			return msg, err
		}
		var suggested time.Duration
		var apiErr *APIError
		if errors.As(err, &apiErr) {
			suggested = apiErr.RetryAfter
		}
		d, ok := b.Next(suggested)
		if !ok {
			return msg, err
		}
		if werr := retry.Sleep(ctx, d); werr != nil {
			return nil, errors.Join(err, werr)
		}
	}
}
