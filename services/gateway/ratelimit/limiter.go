package ratelimit

import (
	"container/list"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// Limits, as refusals and the metrics' limit label name them.
const (
	LimitRate       = "rate"
	LimitConcurrent = "concurrent"
	LimitBytes      = "bytes"
)

// kinds are the limits in the order a call is checked against them.
var kinds = [...]string{LimitRate, LimitBytes, LimitConcurrent}

// opTimeout bounds the NATS requests of one call's admission.
const opTimeout = 2 * time.Second

// maxToolCache bounds the tool → matching groups cache.
const maxToolCache = 10_000

// errContended: the key kept changing under every compare-and-set.
var errContended = errors.New("ratelimit: key contended")

// Refusal says why a call was not admitted. Its Message names the rule and
// its limit, never another principal.
type Refusal struct {
	Rule  string
	Limit string
	// RetryAfter is when to try again (0 with Unavailable).
	RetryAfter time.Duration
	Message    string
	// Unavailable: NATS is away and WhenNATSDown is Closed.
	Unavailable bool
}

// Limiter admits calls under the rules. Create it with [New]; run
// [Limiter.Run] for as long as it is used; [Limiter.Attach] it to NATS.
type Limiter struct {
	cfg    Config
	log    *slog.Logger
	id     string
	groups []*group
	mem    *memStore
	kv     atomic.Pointer[kvStore]
	now    func() time.Time

	mu    sync.Mutex
	keys  map[string]*list.Element
	lru   *list.List
	tools map[string][]*group

	decisions *prometheus.CounterVec
	running   *prometheus.GaugeVec
	degraded  *prometheus.CounterVec
	lastWarn  atomic.Int64
}

// group is the rules of one tool pattern, in order.
type group struct {
	tool  string
	rules []*Rule
}

// New validates cfg and returns its limiter, or nil when cfg has no rules.
func New(cfg Config, log *slog.Logger) (*Limiter, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if len(cfg.Rules) == 0 {
		return nil, nil
	}
	if cfg.Bucket == "" {
		cfg.Bucket = DefaultBucket
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = DefaultLeaseTTL
	}
	if cfg.SyncInterval <= 0 {
		cfg.SyncInterval = DefaultSyncInterval
	}
	if cfg.MaxKeys <= 0 {
		cfg.MaxKeys = DefaultMaxKeys
	}
	if log == nil {
		log = slog.Default()
	}
	var id [6]byte
	_, _ = rand.Read(id[:])
	l := &Limiter{cfg: cfg, log: log, id: hex.EncodeToString(id[:]), mem: newMemStore(), now: time.Now,
		keys: map[string]*list.Element{}, lru: list.New(), tools: map[string][]*group{},
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toolfleet_gateway_limit_decisions_total",
			Help: "Admission decisions of the operator's limits, by rule, limit (rate, concurrent, bytes) and decision (admitted, refused).",
		}, []string{"rule", "limit", "decision"}),
		running: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "toolfleet_gateway_limit_running_calls",
			Help: "Calls running on this replica under a rule with a concurrency limit, by rule.",
		}, []string{"rule"}),
		degraded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toolfleet_gateway_limit_degraded_total",
			Help: "Admissions decided without the shared NATS state, by what was done instead (local, open, closed).",
		}, []string{"policy"}),
	}
	byTool := map[string]*group{}
	for i := range l.cfg.Rules {
		r := &l.cfg.Rules[i]
		for k, kind := range kinds {
			r.admitted[k] = l.decisions.WithLabelValues(r.Name, kind, "admitted")
		}
		r.running = l.running.WithLabelValues(r.Name)
		g := byTool[r.tool]
		if g == nil {
			g = &group{tool: r.tool}
			byTool[r.tool] = g
			l.groups = append(l.groups, g)
		}
		g.rules = append(g.rules, r)
	}
	return l, nil
}

// Collectors are the limiter's Prometheus metrics. Labels are bounded: rule
// names come from the configuration (at most MaxRules), never principals.
func (l *Limiter) Collectors() []prometheus.Collector {
	keys := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "toolfleet_gateway_limit_keys",
		Help: "(limit, rule, principal) keys this replica tracks (bounded by --limits-max-keys)."}, func() float64 {
		l.mu.Lock()
		defer l.mu.Unlock()
		return float64(len(l.keys))
	})
	return []prometheus.Collector{l.decisions, l.running, l.degraded, keys}
}

// Attach creates (or updates) the bucket and shares the state through it
// from now on.
func (l *Limiter) Attach(ctx context.Context, nc *nats.Conn, js jetstream.JetStream) error {
	s, err := newKVStore(ctx, nc, js, l.cfg)
	if err != nil {
		return err
	}
	l.kv.Store(s)
	return nil
}

// Shared reports whether the limiter uses the shared state in NATS now.
func (l *Limiter) Shared() bool { return l.kv.Load().up() }

// Ticket is an admitted call; call Done once when it ends.
type Ticket struct {
	l   *Limiter
	now time.Time
	// all are the entries looked up (referenced until Done); taken the rate
	// leases a call was taken from; conc the running slots; bytes the byte
	// quotas the request was counted against (req bytes).
	all, taken, conc, bytes []*entry
	req                     int64
	done                    atomic.Bool
}

// Done ends the call: its running slots are released and resultBytes are
// counted against the byte quotas. A nil Ticket (no rule applied) is fine.
func (t *Ticket) Done(resultBytes int64) {
	if t == nil || !t.done.CompareAndSwap(false, true) {
		return
	}
	for _, e := range t.bytes {
		e.mu.Lock()
		e.pending += max(resultBytes, 0)
		e.sticky.Store(true)
		e.mu.Unlock()
	}
	for _, e := range t.conc {
		t.l.release(e)
	}
	t.unref()
}

// Charge counts n bytes against principal's byte quotas for tool without
// deciding anything: bytes that are known only after the call was admitted
// (what a store kept for it). They reach the shared state at the next sync.
func (l *Limiter) Charge(principal, tool string, n int64) {
	if n <= 0 {
		return
	}
	var who string
	for _, r := range l.applying(principal, tool) {
		if r.Bytes <= 0 {
			continue
		}
		if who == "" {
			sum := sha256.Sum256([]byte(principal))
			who = hex.EncodeToString(sum[:16])
		}
		e := l.entry(LimitBytes, r, who)
		if e == nil {
			continue // every tracked key is in use: this charge is lost
		}
		e.mu.Lock()
		if win := l.now().Truncate(time.Duration(r.Window)).UnixNano(); e.win != win {
			e.win, e.used, e.pending, e.synced = win, 0, 0, time.Time{}
		}
		e.pending += n
		e.sticky.Store(true)
		e.mu.Unlock()
		l.mu.Lock()
		e.refs--
		l.mu.Unlock()
	}
}

// CountsBytes reports whether a byte quota applies (the caller then measures
// the result).
func (t *Ticket) CountsBytes() bool { return t != nil && len(t.bytes) > 0 }

func (t *Ticket) unref() {
	t.l.mu.Lock()
	for _, e := range t.all {
		e.refs--
	}
	t.l.mu.Unlock()
}

// Applies reports whether any rule applies to principal calling tool
// ("Toolkit.Tool").
func (l *Limiter) Applies(principal, tool string) bool { return len(l.applying(principal, tool)) > 0 }

// applying is the rule of each group that applies to the call.
func (l *Limiter) applying(principal, tool string) []*Rule {
	if l == nil {
		return nil
	}
	tool = strings.ToLower(tool)
	l.mu.Lock()
	gs, ok := l.tools[tool]
	if !ok {
		for _, g := range l.groups {
			if m, _ := path.Match(g.tool, tool); m {
				gs = append(gs, g)
			}
		}
		if len(l.tools) >= maxToolCache {
			clear(l.tools)
		}
		l.tools[tool] = gs
	}
	l.mu.Unlock()
	var out []*Rule
	for _, g := range gs {
		for _, r := range g.rules {
			if r.principal(principal) {
				out = append(out, r)
				break
			}
		}
	}
	return out
}

// Admit decides a call of tool ("Toolkit.Tool") by principal. reqBytes is
// asked only when a byte quota applies. It returns a ticket (nil when no
// rule applies) or a refusal.
func (l *Limiter) Admit(ctx context.Context, principal, tool string, reqBytes func() int64) (*Ticket, *Refusal) {
	rules := l.applying(principal, tool)
	if len(rules) == 0 {
		return nil, nil
	}
	st, policy := l.store()
	switch policy {
	case Open:
		l.degraded.WithLabelValues(Open).Inc()
		return nil, nil
	case Closed:
		l.degraded.WithLabelValues(Closed).Inc()
		return nil, unavailable(rules[0])
	case Local:
		l.degraded.WithLabelValues(Local).Inc()
	}
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	now := l.now()
	t := &Ticket{l: l, now: now, req: -1}
	sum := sha256.Sum256([]byte(principal))
	who := hex.EncodeToString(sum[:16])
	for _, r := range rules {
		for k, kind := range kinds {
			var op func(*entry) func(store) (bool, time.Duration, error)
			switch {
			case kind == LimitRate && r.Rate > 0:
				op = func(e *entry) func(store) (bool, time.Duration, error) {
					return func(st store) (bool, time.Duration, error) { return l.takeRate(ctx, e, st, now) }
				}
			case kind == LimitBytes && r.Bytes > 0:
				if t.req < 0 {
					t.req = max(reqBytes(), 0)
				}
				op = func(e *entry) func(store) (bool, time.Duration, error) {
					return func(st store) (bool, time.Duration, error) { return l.checkBytes(ctx, e, st, now, t.req) }
				}
			case kind == LimitConcurrent && r.Concurrent > 0:
				op = func(e *entry) func(store) (bool, time.Duration, error) {
					return func(st store) (bool, time.Duration, error) { return l.acquire(ctx, e, st, now) }
				}
			default:
				continue
			}
			e := l.entry(kind, r, who)
			if e == nil {
				return t.refuse(r, kind, time.Second, fmt.Sprintf(
					"the gateway tracks as many callers under its limits as it may at once (%d); try again shortly", l.cfg.MaxKeys))
			}
			t.all = append(t.all, e)
			ok, retry, err := l.fallback(ctx, st, op(e))
			switch {
			case !ok && err != nil:
				t.undo()
				return nil, unavailable(r)
			case !ok:
				return t.refuse(r, kind, retry, "")
			case err != nil:
				// Admitted without the shared state (Open): nothing taken.
			case kind == LimitRate:
				t.taken = append(t.taken, e)
			case kind == LimitBytes:
				t.bytes = append(t.bytes, e)
			case kind == LimitConcurrent:
				t.conc = append(t.conc, e)
			}
			r.admitted[k].Inc()
		}
	}
	return t, nil
}

func unavailable(r *Rule) *Refusal {
	return &Refusal{Unavailable: true, Rule: r.Name,
		Message: "the gateway cannot reach the shared state of its rate limits, and is configured to refuse calls until it can; try again shortly"}
}

// undo gives back what t took and lets its entries go.
func (t *Ticket) undo() {
	if !t.done.CompareAndSwap(false, true) {
		return
	}
	for _, e := range t.taken {
		giveBack(e, t.now)
	}
	for _, e := range t.bytes {
		e.mu.Lock()
		e.pending = max(e.pending-t.req, 0)
		e.mu.Unlock()
	}
	for _, e := range t.conc {
		t.l.release(e)
	}
	t.unref()
}

// refuse undoes what t took and builds the refusal (msg, or the limit's own).
func (t *Ticket) refuse(r *Rule, limit string, retry time.Duration, msg string) (*Ticket, *Refusal) {
	t.l.decisions.WithLabelValues(r.Name, limit, "refused").Inc()
	t.undo()
	retry = max(retry, time.Millisecond)
	if msg == "" {
		msg = message(r, limit, retry)
	}
	return nil, &Refusal{Rule: r.Name, Limit: limit, RetryAfter: retry, Message: msg}
}

// message says which limit refused the call, in terms of the caller's own
// budget only.
func message(r *Rule, limit string, retry time.Duration) string {
	tools := "every tool"
	if r.Tool != "*" {
		tools = "tools " + r.Tool
	}
	after := retry.Round(time.Millisecond).String()
	switch limit {
	case LimitRate:
		return fmt.Sprintf("this caller is over the rate limit %q (%g calls per second, burst %d, for %s); try again in %s",
			r.Name, r.Rate, r.Burst, tools, after)
	case LimitConcurrent:
		return fmt.Sprintf("this caller already runs as many calls at once as the limit %q allows (%d, for %s); try again when one ends",
			r.Name, r.Concurrent, tools)
	}
	return fmt.Sprintf("this caller has used its byte quota %q (%d bytes of requests and results per %s, for %s); it renews in %s",
		r.Name, int64(r.Bytes), time.Duration(r.Window), tools, after)
}

// store is the state to use now and the policy in force: kv (shared), or,
// with NATS away, the memory store (Local), none (Open or Closed). A call
// that falls back warns (warnDown); the background sync does not, so a
// gateway whose bucket is still being set up logs nothing while no call
// needs it.
func (l *Limiter) store() (store, string) { return l.storeFor(true) }

func (l *Limiter) storeFor(warn bool) (store, string) {
	if kv := l.kv.Load(); kv.up() {
		return kv, ""
	}
	if l.cfg.Standalone {
		return l.mem, ""
	}
	if warn {
		l.warnDown(nil)
	}
	if l.cfg.WhenNATSDown == Local {
		return l.mem, Local
	}
	return nil, l.cfg.WhenNATSDown
}

// fallback runs op on st; when the shared state fails to answer, it applies
// the NATS-down policy to this call: Local runs op on the memory store, Open
// admits (ok, with the error), Closed refuses (not ok, with the error).
func (l *Limiter) fallback(ctx context.Context, st store, op func(store) (bool, time.Duration, error)) (bool, time.Duration, error) {
	ok, retry, err := op(st)
	if err == nil || st == store(l.mem) {
		if err != nil {
			return true, 0, err // the memory store does not fail; never refuse on it
		}
		return ok, retry, nil
	}
	l.warnDown(err)
	switch l.cfg.WhenNATSDown {
	case Local:
		l.degraded.WithLabelValues(Local).Inc()
		return l.fallback(ctx, l.mem, op)
	case Open:
		l.degraded.WithLabelValues(Open).Inc()
		return true, 0, err
	}
	l.degraded.WithLabelValues(Closed).Inc()
	return false, 0, err
}

// warnDown logs, at most every 10 s, that the shared state is away.
func (l *Limiter) warnDown(err error) {
	if now := time.Now().UnixNano(); now-l.lastWarn.Load() > int64(10*time.Second) {
		l.lastWarn.Store(now)
		if err == nil {
			l.log.Warn("rate limits: the shared NATS state is not ready (NATS unreachable or the bucket not set up yet)", "when_nats_down", l.cfg.WhenNATSDown)
			return
		}
		l.log.Warn("rate limits: the shared NATS state is away", "when_nats_down", l.cfg.WhenNATSDown, "error", err)
	}
}
