package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"

	"github.com/toolfleet/toolfleet/services/gateway/ratelimit"
)

// Store shares (docs/operations.md "Store shares"): every store a caller
// writes through the gateway — the record of calls by call_id
// (toolfleet_calls), the results behind handles (toolfleet_results) and the
// call events (TOOLFLEET_CALL_EVENTS) — gives one principal at most a share
// of its byte bound, so that one caller filling it never refuses another.
//
// Every entry of those stores expires after the store's max age A, so what a
// principal holds is what it wrote in the last A. A share S is kept as a
// byte window per principal (package ratelimit, in the toolfleet_limits
// bucket, across replicas): a window W = min(A, 24 h) aligned to the epoch,
// n = ⌈A / W⌉ windows per max age, S / n bytes per window. What a principal
// holds at any moment was written in at most n + 1 windows, so it stays
// under (n + 1) / n × S (2 × S for the calls and the results, 8/7 × S for
// the events' seven days), plus what the limiter may pass by (one entry
// admitted while under, the entries in flight, and what other replicas
// admitted within one sync interval). A principal over its share is refused
// new entries until its window renews; its entries expire on their own.

// DefaultStoreShare is the part of each store's byte bound one principal
// may hold (Config.Shares.Fraction): an eighth, as the orchestrator's
// --principal-max-bytes.
const DefaultStoreShare = 1.0 / 8

// NoStoreShare turns the store shares off (Config.Shares.Fraction): one caller
// may then fill a store for everyone.
const NoStoreShare = -1

// ParseStoreShare reads the --store-share flag: "" (the default, an
// eighth), "none" ([NoStoreShare]), a fraction "1/8", a decimal "0.125" or a
// percentage "12.5%", over 0 and at most 1.
func ParseStoreShare(s string) (float64, error) {
	s = strings.TrimSpace(s)
	var v float64
	var err error
	switch num, den, frac := strings.Cut(s, "/"); {
	case s == "":
		return 0, nil
	case s == "none":
		return NoStoreShare, nil
	case frac:
		var a, b float64
		if a, err = strconv.ParseFloat(num, 64); err == nil {
			b, err = strconv.ParseFloat(den, 64)
		}
		if err == nil && b != 0 {
			v = a / b
		}
	case strings.HasSuffix(s, "%"):
		v, err = strconv.ParseFloat(strings.TrimSuffix(s, "%"), 64)
		v /= 100
	default:
		v, err = strconv.ParseFloat(s, 64)
	}
	if err != nil || !(v > 0 && v <= 1) {
		return 0, fmt.Errorf("store share %q: want a part of each store such as 1/8, 0.125 or 12.5%% (over 0, at most 1), or none", s)
	}
	return v, nil
}

// The stores with a share, as the share limiter's tools name them.
const (
	shareCalls   = "store.calls"
	shareResults = "store.results"
	shareEvents  = "store.events"
)

// storeShares is the gateway's limiter of the stores' shares; nil when off
// or without NATS.
type storeShares struct {
	l       *ratelimit.Limiter
	figures map[string]shareFigures
	refused *prometheus.CounterVec
}

// shareFigures are one store's share, as refusals name them.
type shareFigures struct {
	what   string // the store, in a caller's terms
	share  int64  // bytes one principal may hold
	window time.Duration
	budget int64 // bytes per window
}

// shareOf works out a store's share of its byte bound maxBytes, with entries
// that expire after maxAge (0: never by age; a window of a day is used).
func shareOf(what string, fraction float64, maxBytes int64, maxAge time.Duration) shareFigures {
	share := max(int64(float64(maxBytes)*fraction), 1)
	w := min(maxAge, ratelimit.MaxWindow)
	if w <= 0 {
		w = ratelimit.MaxWindow
	}
	n := max(int64((maxAge+w-1)/w), 1)
	return shareFigures{what: what, share: share, window: w, budget: max(share/n, 1)}
}

// newStoreShares builds the shares of cfg's stores; nil when they are off
// or the gateway has no NATS (no stores).
func newStoreShares(cfg Config, log *slog.Logger, m *metrics) (*storeShares, error) {
	if cfg.NATSURL == "" || cfg.Shares.Fraction < 0 {
		return nil, nil
	}
	fraction := cfg.Shares.Fraction
	if fraction == 0 {
		fraction = DefaultStoreShare
	}
	if fraction > 1 {
		return nil, fmt.Errorf("gateway: Shares.Fraction %g: want a part of a store (0 to 1) or NoStoreShare", fraction)
	}
	idem, res, ev := cfg.IdempotencyConfig(), cfg.ResultsConfig(), cfg.EventStreamConfig()
	if err := res.Defaults(); err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	s := &storeShares{figures: map[string]shareFigures{
		shareCalls:   shareOf("the gateway's record of calls by call_id", fraction, idem.MaxBytes, idem.TTL),
		shareResults: shareOf("the gateway's store of results behind handles", fraction, res.MaxBytes, res.TTL),
		shareEvents:  shareOf("the gateway's call event stream", fraction, ev.MaxBytes, ev.MaxAge),
	}, refused: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolfleet_gateway_store_share_refused_total",
		Help: "Writes refused because their principal holds its share of a store (calls, results, events); events are not stored.",
	}, []string{"store"})}
	var rules []ratelimit.Rule
	for _, tool := range []string{shareCalls, shareResults, shareEvents} {
		f := s.figures[tool]
		rules = append(rules, ratelimit.Rule{Name: tool[len("store."):], Tool: tool,
			Bytes: ratelimit.ByteSize(f.budget), Window: ratelimit.Duration(f.window)})
	}
	// Standalone until Attach: each replica counts alone while the bucket
	// is not there (the stores are not there either, then).
	l, err := ratelimit.New(ratelimit.Config{Rules: rules, Assets: cfg.Assets, Standalone: true, Scope: "share.",
		Bucket: cfg.Limits.Bucket}, log)
	if err != nil {
		return nil, fmt.Errorf("gateway: store shares: %w", err)
	}
	s.l = l
	m.reg.MustRegister(s.refused)
	return s, nil
}

// shareRefusal is a write refused because its principal holds its share of
// a store; its message names that principal's own figures only.
type shareRefusal struct {
	store      string
	retryAfter time.Duration
	msg        string
}

func (r *shareRefusal) Error() string { return r.msg }

// admit reports nil when principal may add to store, else a *shareRefusal.
// A nil storeShares admits everything.
func (s *storeShares) admit(ctx context.Context, store, principal string) error {
	if s == nil {
		return nil
	}
	t, r := s.l.Admit(ctx, principal, store, func() int64 { return 0 })
	if r == nil {
		t.Done(0)
		return nil
	}
	s.refused.WithLabelValues(store[len("store."):]).Inc()
	f := s.figures[store]
	retry := max(r.RetryAfter, time.Millisecond)
	return &shareRefusal{store: store, retryAfter: retry, msg: fmt.Sprintf(
		"this caller has used its share of %s (%d bytes written per %s); it renews in %s",
		f.what, f.budget, f.window, retry.Round(time.Millisecond))}
}

// charge counts n bytes principal wrote to store.
func (s *storeShares) charge(store, principal string, n int64) {
	if s != nil {
		s.l.Charge(principal, store, n)
	}
}

// run keeps the counters in the shared state until ctx ends.
func (s *storeShares) run(ctx context.Context) {
	if s != nil {
		s.l.Run(ctx)
	}
}

// attach shares the counters through the toolfleet_limits bucket.
func (s *storeShares) attach(ctx context.Context, nc *nats.Conn, js jetstream.JetStream) error {
	return s.l.Attach(ctx, nc, js)
}

// storeShare is one store's share, as the store's package asks for it
// (idempotency.Share, events.Share).
type storeShare struct {
	s     *storeShares
	store string
}

func (s storeShare) Admit(ctx context.Context, principal string) error {
	return s.s.admit(ctx, s.store, principal)
}

func (s storeShare) Charge(principal string, n int64) { s.s.charge(s.store, principal, n) }

// shareRefused is the answer to a call refused because its caller holds its
// share of a store: RESOURCE_EXHAUSTED with the delay after which its window
// renews, as over an operator's quota (docs/gateway.md "The three failure
// kinds"). what names the call; next says what the caller may do.
func shareRefused(err error, what, next string) *CallError {
	var r *shareRefusal
	if !errors.As(err, &r) {
		return serverError(codes.Internal, err, err.Error(), "the gateway could not check the caller's share of its stores")
	}
	ce := serverError(codes.ResourceExhausted, ErrRateLimited, "share of "+r.store, "%s was not run: %s; %s", what, r.msg, next)
	ce.RetryAfter = r.retryAfter
	return ce
}
