package natsconn

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// RetryPolicy says how [Retry] waits between attempts. The zero value is usable.
type RetryPolicy struct {
	// What names the step in logs and in the final error, e.g. "connect to NATS".
	What string
	// Log receives one line per failed attempt (at most one every LogEvery after
	// the first few). Nil logs nothing.
	Log *slog.Logger
	// Temporary says whether an error may pass by itself. Default [Temporary].
	// An error it rejects ends the retries at once.
	Temporary func(error) bool
	// Initial is the first wait (default 200ms); each wait doubles up to Max
	// (default 5s), with up to a quarter of jitter.
	Initial, Max time.Duration
}

// Retry calls f until it succeeds, fails with an error that p.Temporary says
// will not pass (a malformed URL, refused credentials, a JetStream limit), or
// ctx ends; f gets ctx. It is how a component started in any order waits for
// NATS (and what it creates in JetStream) instead of exiting: in Kubernetes a
// pod often starts before cluster DNS answers for the NATS Service, or before
// a 3-node JetStream cluster has elected its leader.
//
// When ctx ends first, the error wraps ctx's error and the last attempt's.
func Retry[T any](ctx context.Context, p RetryPolicy, f func(context.Context) (T, error)) (T, error) {
	if p.Temporary == nil {
		p.Temporary = Temporary
	}
	if p.Initial <= 0 {
		p.Initial = 200 * time.Millisecond
	}
	if p.Max < p.Initial {
		p.Max = max(5*time.Second, p.Initial)
	}
	if p.What == "" {
		p.What = "start"
	}
	delay := p.Initial
	var lastLog time.Time
	for attempt := 1; ; attempt++ {
		v, err := f(ctx)
		if err == nil {
			if attempt > 1 && p.Log != nil {
				p.Log.Info(p.What+": done after retries", "attempts", attempt)
			}
			return v, nil
		}
		if ctx.Err() != nil {
			var zero T
			return zero, fmt.Errorf("%s: %w (after %d attempts; last: %w)", p.What, ctx.Err(), attempt, err)
		}
		if !p.Temporary(err) {
			var zero T
			return zero, fmt.Errorf("%s: %w", p.What, err)
		}
		if p.Log != nil && (attempt <= 3 || time.Since(lastLog) >= logEvery) {
			p.Log.Warn(p.What+": not yet, retrying", "attempt", attempt, "retry_in", delay.String(), "error", err)
			lastLog = time.Now()
		}
		// Up to a quarter of jitter, so replicas started together spread out.
		wait := delay - time.Duration(time.Now().UnixNano()%int64(delay/4+1))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			var zero T
			return zero, fmt.Errorf("%s: %w (after %d attempts; last: %w)", p.What, ctx.Err(), attempt, err)
		case <-t.C:
		}
		delay = min(2*delay, p.Max)
	}
}

// logEvery spaces the log lines of a long wait.
const logEvery = 30 * time.Second

// ConnectRetry is [Options.Connect] retried by [Retry] while no server answers
// (the name does not resolve yet, the port refuses, the connection times out),
// until ctx ends. Refused credentials and invalid options fail at once.
func (o Options) ConnectRetry(ctx context.Context, log *slog.Logger, url, name string, extra ...nats.Option) (*nats.Conn, error) {
	return Retry(ctx, RetryPolicy{What: "connect to NATS at " + url, Log: log},
		func(context.Context) (*nats.Conn, error) { return o.Connect(url, name, extra...) })
}

// temporaryJetStream are the JetStream API error codes that a cluster that is
// still forming (or electing a leader) answers with.
var temporaryJetStream = map[jetstream.ErrorCode]bool{
	10004: true, // incomplete results
	10005: true, // no suitable peers for placement: peers still joining
	10008: true, // JetStream system temporarily unavailable: no meta leader yet
	10009: true, // JetStream cluster can not handle request
	10023: true, // insufficient resources: peers not reporting yet
}

// Temporary reports whether err is one that passes once NATS is up: no server
// reachable (DNS, refused, reset, timeout), no responder or no leader for a
// JetStream request, a JetStream cluster still forming. Errors of the options
// themselves ([ErrInvalid], unreadable files), refused credentials, a server
// without JetStream and JetStream limits (insufficient storage: a setting to
// change) are not.
func Temporary(err error) bool {
	if err == nil || errors.Is(err, ErrInvalid) {
		return false
	}
	var api *jetstream.APIError
	if errors.As(err, &api) {
		return temporaryJetStream[api.ErrorCode] || (api.Code == 503 && api.ErrorCode == 0)
	}
	if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) ||
		errors.Is(err, nats.ErrAuthRevoked) || errors.Is(err, nats.ErrAccountAuthExpired) {
		return false
	}
	for _, target := range []error{
		nats.ErrNoServers, nats.ErrTimeout, nats.ErrNoResponders, nats.ErrConnectionClosed,
		nats.ErrConnectionReconnecting, nats.ErrDisconnected, nats.ErrStaleConnection,
		jetstream.ErrNoHeartbeat,
		context.DeadlineExceeded, io.EOF, io.ErrUnexpectedEOF,
		syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.EHOSTUNREACH, syscall.ENETUNREACH,
	} {
		if errors.Is(err, target) {
			return true
		}
	}
	var dns *net.DNSError
	var op *net.OpError
	return errors.As(err, &dns) || errors.As(err, &op)
}
