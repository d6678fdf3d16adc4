package client

import (
	"context"
	"net/http"
	"time"

	"google.golang.org/grpc"
)

// Defaults of the client's options.
const (
	// DefaultTimeout bounds a call (all its attempts) whose context has no deadline.
	DefaultTimeout = 60 * time.Second
	// DefaultMaxAttempts is the number of attempts of a retryable call, the first included.
	DefaultMaxAttempts = 3
	// DefaultInitialBackoff is the wait before the first retry when the tool suggests none.
	DefaultInitialBackoff = 200 * time.Millisecond
	// DefaultMaxBackoff caps the wait between two attempts.
	DefaultMaxBackoff = 10 * time.Second
)

// TokenSource returns the bearer token to send with a call ("" sends none). It is
// called once per attempt, so it may refresh short-lived tokens.
type TokenSource func(ctx context.Context) (string, error)

// StaticToken is a TokenSource that always returns token.
func StaticToken(token string) TokenSource {
	return func(context.Context) (string, error) { return token, nil }
}

// RetryPolicy bounds the automatic retries of execution errors marked can_retry.
// Server and validation errors are never retried: the same request would fail
// the same way.
type RetryPolicy struct {
	// MaxAttempts counts every attempt, the first included; 1 disables retries.
	// Default [DefaultMaxAttempts].
	MaxAttempts int
	// InitialBackoff is the first wait when the error carries no retry_after_ms;
	// it doubles on each retry. Default [DefaultInitialBackoff].
	InitialBackoff time.Duration
	// MaxBackoff caps every wait, retry_after_ms included. Default [DefaultMaxBackoff].
	MaxBackoff time.Duration
}

func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = DefaultMaxAttempts
	}
	if p.InitialBackoff <= 0 {
		p.InitialBackoff = DefaultInitialBackoff
	}
	if p.MaxBackoff <= 0 {
		p.MaxBackoff = DefaultMaxBackoff
	}
	return p
}

// delay is the wait before attempt n+1 (n ≥ 1 attempts done): the tool's
// retry_after when it gave one, else exponential backoff; capped by MaxBackoff.
func (p RetryPolicy) delay(n int, retryAfter time.Duration) time.Duration {
	d := retryAfter
	if d <= 0 {
		d = p.InitialBackoff
		for i := 1; i < n && d < p.MaxBackoff; i++ {
			d *= 2
		}
	}
	return min(d, p.MaxBackoff)
}

// Option configures a [Client].
type Option func(*options)

type options struct {
	token      TokenSource
	timeout    time.Duration
	retry      RetryPolicy
	dialOpts   []grpc.DialOption
	connect    bool
	httpClient *http.Client
}

// WithToken sends a static bearer token with every call. Default: none (for a
// gateway with auth off).
func WithToken(token string) Option {
	return func(o *options) { o.token = StaticToken(token) }
}

// WithTokenSource asks src for the bearer token of every attempt.
func WithTokenSource(src TokenSource) Option {
	return func(o *options) { o.token = src }
}

// WithTimeout bounds each call, its retries included, when the caller's context
// has no deadline. Default [DefaultTimeout]. A deadline on the context always wins.
func WithTimeout(d time.Duration) Option {
	return func(o *options) { o.timeout = d }
}

// WithRetry sets the retry policy of execution errors marked can_retry; zero
// fields take the defaults. WithRetry(RetryPolicy{MaxAttempts: 1}) disables retries.
func WithRetry(p RetryPolicy) Option {
	return func(o *options) { o.retry = p }
}

// WithDialOptions adds grpc-go dial options, e.g. TLS transport credentials
// (the default is plaintext, as the gateway's dev listener speaks h2c).
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) { o.dialOpts = append(o.dialOpts, opts...) }
}

// WithConnect speaks the Connect protocol over hc (nil: http.DefaultClient)
// instead of gRPC, e.g. through HTTP/1.1 proxies. The target may then be a URL
// ("https://gateway.example.com"); a bare host:port means plain http.
func WithConnect(hc *http.Client) Option {
	return func(o *options) {
		o.connect = true
		o.httpClient = hc
	}
}
