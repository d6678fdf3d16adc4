// Package retry is toolfleet's one retry policy: a bounded number of attempts
// with jittered exponential backoff (github.com/cenkalti/backoff/v5), honouring a
// delay the other side suggests (a tool's retry_after_ms, a provider's
// retry-after). sdk/client retries tool calls with it, following each tool
// contract's RetryPolicy ([FromProto]); sdk/llm retries model calls with it.
package retry

import (
	"context"
	"time"

	"github.com/cenkalti/backoff/v5"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// Defaults of [Policy].
const (
	// DefaultMaxAttempts counts every attempt, the first included.
	DefaultMaxAttempts = 3
	// DefaultInitialBackoff is the wait before the first retry.
	DefaultInitialBackoff = 200 * time.Millisecond
	// DefaultMaxBackoff caps every wait.
	DefaultMaxBackoff = 10 * time.Second
	// DefaultMultiplier is the growth of the wait from one retry to the next.
	DefaultMultiplier = 2.0
	// DefaultJitter spreads each wait by ±20 %, so that callers that failed
	// together do not all come back at the same instant.
	DefaultJitter = 0.2
)

// Policy bounds retries. Zero fields take the defaults; [Policy.WithDefaults]
// fills them in.
type Policy struct {
	// MaxAttempts counts every attempt, the first included; 1 disables retries.
	MaxAttempts int
	// InitialBackoff is the wait before the first retry when the other side
	// suggests none.
	InitialBackoff time.Duration
	// MaxBackoff caps every wait, a suggested one included.
	MaxBackoff time.Duration
	// Multiplier grows the wait from one retry to the next.
	Multiplier float64
	// Jitter is the randomization factor in (0, 1]: each computed wait is drawn
	// from [wait·(1-Jitter), wait·(1+Jitter)]. A negative value disables jitter.
	Jitter float64
}

// WithDefaults returns p with every zero field set to its default.
func (p Policy) WithDefaults() Policy {
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = DefaultMaxAttempts
	}
	if p.InitialBackoff <= 0 {
		p.InitialBackoff = DefaultInitialBackoff
	}
	if p.MaxBackoff <= 0 {
		p.MaxBackoff = DefaultMaxBackoff
	}
	if p.Multiplier < 1 {
		p.Multiplier = DefaultMultiplier
	}
	if p.Jitter == 0 {
		p.Jitter = DefaultJitter
	}
	p.Jitter = min(p.Jitter, 1)
	return p
}

// Or returns p with its zero fields taken from fallback.
func (p Policy) Or(fallback Policy) Policy {
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = fallback.MaxAttempts
	}
	if p.InitialBackoff <= 0 {
		p.InitialBackoff = fallback.InitialBackoff
	}
	if p.MaxBackoff <= 0 {
		p.MaxBackoff = fallback.MaxBackoff
	}
	if p.Multiplier <= 0 {
		p.Multiplier = fallback.Multiplier
	}
	if p.Jitter == 0 {
		p.Jitter = fallback.Jitter
	}
	return p
}

// FromProto converts a tool contract's retry policy; unset fields stay zero (so
// that [Policy.Or] can fill them from a caller's defaults).
func FromProto(rp *toolfleetv1.RetryPolicy) Policy {
	return Policy{
		MaxAttempts:    int(rp.GetMaxAttempts()),
		InitialBackoff: rp.GetInitialBackoff().AsDuration(),
		MaxBackoff:     rp.GetMaxBackoff().AsDuration(),
		Multiplier:     rp.GetBackoffMultiplier(),
	}
}

// Backoff is the sequence of waits of one operation; make one per operation
// with [Policy.Backoff]. It is not safe for concurrent use.
type Backoff struct {
	p        Policy
	b        *backoff.ExponentialBackOff
	attempts int
}

// Backoff starts the waits of one operation under p (defaults applied); the
// first attempt counts as made.
func (p Policy) Backoff() *Backoff {
	p = p.WithDefaults()
	jitter := max(p.Jitter, 0)
	b := &backoff.ExponentialBackOff{InitialInterval: p.InitialBackoff, RandomizationFactor: jitter,
		Multiplier: p.Multiplier, MaxInterval: p.MaxBackoff}
	b.Reset()
	return &Backoff{p: p, b: b, attempts: 1}
}

// Attempts is the number of attempts made so far.
func (b *Backoff) Attempts() int { return b.attempts }

// Next returns the wait before the next attempt and counts that attempt, or
// false when the attempts are spent. suggested, when positive, is the delay the
// other side asked for; it replaces the computed wait (capped by MaxBackoff).
func (b *Backoff) Next(suggested time.Duration) (time.Duration, bool) {
	if b.attempts >= b.p.MaxAttempts {
		return 0, false
	}
	b.attempts++
	d := b.b.NextBackOff() // advances the exponential sequence either way
	if suggested > 0 {
		d = suggested
	}
	return min(d, b.p.MaxBackoff), true
}

// Sleep waits d or until ctx is done, returning ctx's error in that case.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
