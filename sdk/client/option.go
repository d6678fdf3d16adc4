package client

import (
	"context"
	"net/http"
	"time"

	"google.golang.org/grpc"

	"github.com/toolfleet/toolfleet/sdk/retry"
)

// Defaults of the client's options.
const (
	// DefaultTimeout bounds a call (all its attempts) whose context has no deadline.
	DefaultTimeout = 60 * time.Second
	// DefaultMaxAttempts is the number of attempts of a retryable call, the first
	// included, when the tool's contract sets none.
	DefaultMaxAttempts = retry.DefaultMaxAttempts
	// DefaultInitialBackoff is the wait before the first retry when neither the
	// contract nor the tool suggests one.
	DefaultInitialBackoff = retry.DefaultInitialBackoff
	// DefaultMaxBackoff caps the wait between two attempts.
	DefaultMaxBackoff = retry.DefaultMaxBackoff
)

// TokenSource returns the bearer token to send with a call ("" sends none). It is
// called once per attempt, so it may refresh short-lived tokens.
type TokenSource func(ctx context.Context) (string, error)

// StaticToken is a TokenSource that always returns token.
func StaticToken(token string) TokenSource {
	return func(context.Context) (string, error) { return token, nil }
}

// RetryPolicy bounds the automatic retries (see [Client.CallTool]): it is the
// one jittered-backoff policy of package retry. A tool contract's own retry
// policy wins over it field by field.
type RetryPolicy = retry.Policy

// Option configures a [Client].
type Option func(*options)

type options struct {
	token      TokenSource
	timeout    time.Duration
	retry      RetryPolicy
	dialOpts   []grpc.DialOption
	connect    bool
	httpClient *http.Client
	handles    bool
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

// WithRetry sets the retry policy for what a tool's contract leaves unset (the
// contract's retry policy wins field by field); zero fields take the defaults.
// WithRetry(RetryPolicy{MaxAttempts: 1}) disables retries whatever the contracts say.
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

// WithResultHandles allows a result handle on every call (CallToolRequest's
// allow_result_handle): a result over the tool's max_result_bytes comes back as
// [Result.Handle], to be read with [Client.FetchResult], instead of failing the
// call. Default off; a request may also set allow_result_handle itself. The
// gateway needs NATS to keep results.
func WithResultHandles() Option {
	return func(o *options) { o.handles = true }
}
