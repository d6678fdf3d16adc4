package ratelimit

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natsx/natstest"
	"github.com/toolfleet/toolfleet/sdk/jsassets"
)

// clock is a logical clock shared by the replicas of a test: no assertion
// depends on how fast the machine runs.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// replicas starts n limiters with rules on one embedded NATS server, as n
// gateway replicas would share it.
func replicas(t *testing.T, n int, clk *clock, rules ...Rule) []*Limiter {
	t.Helper()
	srv := natstest.Start(t)
	out := make([]*Limiter, n)
	for i := range out {
		nc, err := nats.Connect(srv.URL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		l, err := New(Config{Rules: append([]Rule(nil), rules...), WhenNATSDown: Closed, LeaseTTL: 3 * time.Second,
			Assets: jsassets.Config{Storage: jsassets.StorageMemory, Profile: jsassets.ProfileDev}}, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		l.now = clk.now
		if err := l.Attach(t.Context(), nc, js); err != nil {
			t.Fatal(err)
		}
		out[i] = l
	}
	return out
}

func newClock() *clock { return &clock{t: time.Date(2026, 11, 26, 1, 0, 0, 0, time.UTC)} }

func admit(t *testing.T, l *Limiter, principal, tool string, req int64) (*Ticket, *Refusal) {
	t.Helper()
	tk, ref := l.Admit(t.Context(), principal, tool, func() int64 { return req })
	if ref != nil && ref.Unavailable {
		t.Fatalf("refused as unavailable: %s", ref.Message)
	}
	return tk, ref
}

// The rate is shared: two replicas together admit the burst, then the rate,
// and a refusal says when to come back; another principal and another tool
// keep their own budgets.
func TestRateAcrossReplicas(t *testing.T) {
	t.Parallel()
	clk := newClock()
	ls := replicas(t, 2, clk, Rule{Name: "calc", Tool: "calculator.*", Rate: 10, Burst: 10})
	admitted := 0
	var last *Refusal
	for i := range 30 {
		tk, ref := admit(t, ls[i%2], "alice", "Calculator.Add", 0)
		if ref == nil {
			admitted++
			tk.Done(0)
			continue
		}
		last = ref
	}
	if admitted != 10 {
		t.Fatalf("admitted %d of 30 calls at one instant across two replicas, want the burst (10)", admitted)
	}
	if last.Limit != LimitRate || last.Rule != "calc" || last.RetryAfter <= 0 || last.RetryAfter > 100*time.Millisecond {
		t.Fatalf("refusal %+v: want the rate limit of rule calc, retry within one interval (100ms)", last)
	}
	if !strings.Contains(last.Message, `rate limit "calc"`) || strings.Contains(last.Message, "alice") {
		t.Fatalf("message %q: want the rule named and no principal", last.Message)
	}
	// Others are not touched.
	if _, ref := admit(t, ls[0], "bob", "Calculator.Add", 0); ref != nil {
		t.Fatalf("a second principal was refused: %s", ref.Message)
	}
	if _, ref := admit(t, ls[1], "alice", "Search.Web", 0); ref != nil {
		t.Fatalf("another tool was refused: %s", ref.Message)
	}
	// After the retry delay, one more call passes.
	clk.add(last.RetryAfter)
	if _, ref := admit(t, ls[1], "alice", "Calculator.Add", 0); ref != nil {
		t.Fatalf("refused after the retry delay: %s", ref.Message)
	}
}

// Running calls count across replicas; a release frees the slot for the
// other replica once synced; a dead replica's slots lapse with its lease.
func TestConcurrencyAcrossReplicas(t *testing.T) {
	t.Parallel()
	clk := newClock()
	ls := replicas(t, 3, clk, Rule{Name: "two", Concurrent: 2})
	a, _ := admit(t, ls[0], "alice", "Calculator.Add", 0)
	b, _ := admit(t, ls[1], "alice", "Calculator.Add", 0)
	if a == nil || b == nil {
		t.Fatal("the first two calls were refused")
	}
	for i, l := range ls {
		if _, ref := admit(t, l, "alice", "Calculator.Add", 0); ref == nil || ref.Limit != LimitConcurrent || ref.RetryAfter <= 0 {
			t.Fatalf("replica %d admitted a third running call (refusal %+v)", i, ref)
		}
	}
	if _, ref := admit(t, ls[2], "bob", "Calculator.Add", 0); ref != nil {
		t.Fatalf("a second principal was refused: %s", ref.Message)
	}
	a.Done(0)
	ls[0].Sync(t.Context())
	c, ref := admit(t, ls[2], "alice", "Calculator.Add", 0)
	if ref != nil {
		t.Fatalf("refused after a release: %s", ref.Message)
	}
	// Replica 1 dies holding b's slot, replica 2 holds c's: full.
	_ = b
	if _, ref := admit(t, ls[0], "alice", "Calculator.Add", 0); ref == nil {
		t.Fatal("admitted over the limit")
	}
	// Replica 2 renews its lease as time passes; replica 1 never does.
	for range 4 {
		clk.add(time.Second)
		ls[2].Sync(t.Context())
	}
	if _, ref := admit(t, ls[0], "alice", "Calculator.Add", 0); ref != nil {
		t.Fatalf("the dead replica's slot did not lapse: %s", ref.Message)
	}
	if _, ref := admit(t, ls[0], "alice", "Calculator.Add", 0); ref == nil {
		t.Fatal("the live replica's renewed slot lapsed")
	}
	c.Done(0)
}

// A busy replica keeps a sixteenth of a large concurrency limit as spare
// slots (no NATS round trip for the next calls); the fleet never runs more
// than the limit, and the spare slots go back once the replica is idle.
func TestConcurrencySpareSlots(t *testing.T) {
	t.Parallel()
	clk := newClock()
	ls := replicas(t, 2, clk, Rule{Name: "wide", Concurrent: 32})
	a, _ := admit(t, ls[0], "alice", "X.Y", 0) // holds 1 + 2 spare
	var held []*Ticket
	for {
		tk, ref := admit(t, ls[1], "alice", "X.Y", 0)
		if ref != nil {
			break
		}
		held = append(held, tk)
	}
	if len(held) != 29 {
		t.Fatalf("replica B ran %d calls beside replica A's 1 (+2 spare), want 29", len(held))
	}
	a.Done(0)
	ls[0].Sync(t.Context()) // idle: every slot goes back
	for range 3 {
		if _, ref := admit(t, ls[1], "alice", "X.Y", 0); ref != nil {
			t.Fatalf("replica A's slots were not given back: %s", ref.Message)
		}
	}
	if _, ref := admit(t, ls[1], "alice", "X.Y", 0); ref == nil {
		t.Fatal("ran more than 32 calls at once")
	}
}

// Bytes of requests and results count against the window across replicas;
// the refusal says when the window renews.
func TestBytesAcrossReplicas(t *testing.T) {
	t.Parallel()
	clk := newClock()
	ls := replicas(t, 2, clk, Rule{Name: "quota", Tool: "search.*", Bytes: 1000, Window: Duration(time.Hour)})
	tk, ref := admit(t, ls[0], "alice", "Search.Web", 300)
	if ref != nil {
		t.Fatal(ref.Message)
	}
	tk.Done(500) // 800 in all
	ls[0].Sync(t.Context())
	clk.add(time.Second) // past SyncInterval: replica 1 reads the counter
	tk, ref = admit(t, ls[1], "alice", "Search.Web", 100)
	if ref != nil {
		t.Fatalf("refused at 800 of 1000 bytes: %s", ref.Message)
	}
	tk.Done(200) // 1100
	ls[1].Sync(t.Context())
	clk.add(time.Second)
	_, ref = admit(t, ls[0], "alice", "Search.Web", 1)
	if ref == nil || ref.Limit != LimitBytes {
		t.Fatalf("admitted over the quota (refusal %+v)", ref)
	}
	if want := time.Hour - 2*time.Second; ref.RetryAfter != want {
		t.Fatalf("retry after %s, want the rest of the window %s", ref.RetryAfter, want)
	}
	if _, ref := admit(t, ls[0], "alice", "Calculator.Add", 1); ref != nil {
		t.Fatalf("a tool outside the pattern was refused: %s", ref.Message)
	}
	clk.add(ref.RetryAfter)
	if _, ref := admit(t, ls[0], "alice", "Search.Web", 1); ref != nil {
		t.Fatalf("refused in the next window: %s", ref.Message)
	}
}

// In each group of rules with the same tool pattern the first rule whose
// principal matches applies: a named principal gets its own limit.
func TestFirstMatchingPrincipalPerGroup(t *testing.T) {
	t.Parallel()
	clk := newClock()
	ls := replicas(t, 1, clk,
		Rule{Name: "batch", Principal: "svc-*", Rate: 100, Burst: 5},
		Rule{Name: "everyone", Rate: 1, Burst: 1},
		Rule{Name: "search", Tool: "search.*", Rate: 1, Burst: 2})
	l := ls[0]
	for i := range 5 {
		if _, ref := admit(t, l, "svc-batch", "Calculator.Add", 0); ref != nil {
			t.Fatalf("call %d of svc-batch refused: %s", i, ref.Message)
		}
	}
	if _, ref := admit(t, l, "svc-batch", "Calculator.Add", 0); ref == nil || ref.Rule != "batch" {
		t.Fatalf("want the batch rule to refuse the sixth call, got %+v", ref)
	}
	// svc-batch on search: its own rule in the "*" group and the search group's.
	if _, ref := admit(t, l, "svc-other", "Search.Web", 0); ref != nil {
		t.Fatal(ref.Message)
	}
	if _, ref := admit(t, l, "alice", "Calculator.Add", 0); ref != nil {
		t.Fatal(ref.Message)
	}
	if _, ref := admit(t, l, "alice", "Calculator.Add", 0); ref == nil || ref.Rule != "everyone" {
		t.Fatalf("want the everyone rule to refuse, got %+v", ref)
	}
}

// With NATS away: closed refuses as unavailable; local enforces alone.
func TestWhenNATSDown(t *testing.T) {
	t.Parallel()
	for _, policy := range []string{Local, Open, Closed} {
		l, err := New(Config{Rules: []Rule{{Rate: 1, Burst: 1}}, WhenNATSDown: policy}, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, first := l.Admit(context.Background(), "alice", "Calculator.Add", nil)
		_, second := l.Admit(context.Background(), "alice", "Calculator.Add", nil)
		switch policy {
		case Local:
			if first != nil || second == nil || second.Unavailable {
				t.Errorf("local: %+v, %+v; want the second call refused by the rate", first, second)
			}
		case Open:
			if first != nil || second != nil {
				t.Errorf("open: %+v, %+v; want both admitted", first, second)
			}
		case Closed:
			if first == nil || !first.Unavailable {
				t.Errorf("closed: %+v; want unavailable", first)
			}
		}
	}
}

// The tracked keys are bounded: past MaxKeys the least recently used idle
// key is evicted; with every key in use, a new principal is refused.
func TestKeysBounded(t *testing.T) {
	t.Parallel()
	l, err := New(Config{Rules: []Rule{{Concurrent: 5}}, MaxKeys: 3, Standalone: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var held []*Ticket
	for _, p := range []string{"a", "b", "c"} {
		tk, ref := l.Admit(context.Background(), p, "X.Y", nil)
		if ref != nil {
			t.Fatal(ref.Message)
		}
		held = append(held, tk)
	}
	if _, ref := l.Admit(context.Background(), "d", "X.Y", nil); ref == nil {
		t.Fatal("a fourth principal was tracked past MaxKeys with every key in use")
	}
	held[0].Done(0)
	l.Sync(context.Background())
	if _, ref := l.Admit(context.Background(), "d", "X.Y", nil); ref != nil {
		t.Fatalf("an idle key was not evicted: %s", ref.Message)
	}
	if n := len(l.keys); n > 3 {
		t.Fatalf("%d keys tracked, bound 3", n)
	}
}

func TestParse(t *testing.T) {
	t.Parallel()
	rules, err := Parse([]byte(`
rules:
  - name: per-caller
    rate: 20
    concurrent: 4
  - tool: "search.*"
    bytes: 10MiB
    window: 1h
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(rules) != 2 || rules[0].Burst != 20 || rules[1].Name != "rule2" || rules[1].Bytes != 10<<20 || rules[0].block != 1 {
		t.Fatalf("rules %+v", rules)
	}
	for _, bad := range []string{
		"rules: [{name: x}]",
		"rules: [{rate: -1}]",
		"rules: [{rate: 1, window: 48h, bytes: 1}]",
		"rules: [{rate: 1, name: a}, {rate: 1, name: a}]",
		"rules: [{rate: 1, unknown: 1}]",
		"rules: [{rate: 1, tool: '['}]",
	} {
		if _, err := Parse([]byte(bad)); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
}

// Charge counts bytes known only after admission: across replicas, the
// charged principal is refused once the window holds its quota, another
// principal is not, and the next window renews it.
func TestChargeAcrossReplicas(t *testing.T) {
	t.Parallel()
	clk := newClock()
	ls := replicas(t, 2, clk, Rule{Name: "calls", Tool: "store.calls", Bytes: 1000, Window: Duration(time.Hour)})
	a, b := ls[0], ls[1]
	tk, ref := admit(t, a, "mallory", "store.calls", 0)
	if ref != nil {
		t.Fatalf("first write: %s", ref.Message)
	}
	tk.Done(0)
	a.Charge("mallory", "store.calls", 1000)
	a.Sync(t.Context())
	clk.add(time.Second) // b's copy of the counter is older than the sync interval
	if _, ref := admit(t, b, "mallory", "store.calls", 0); ref == nil || ref.Limit != LimitBytes || ref.RetryAfter <= 0 {
		t.Fatalf("mallory after charging her quota on the other replica: %+v; want refused for bytes with a retry delay", ref)
	}
	if _, ref := admit(t, b, "alice", "store.calls", 0); ref != nil {
		t.Fatalf("alice: %s", ref.Message)
	}
	clk.add(time.Hour)
	if _, ref := admit(t, b, "mallory", "store.calls", 0); ref != nil {
		t.Fatalf("mallory in the next window: %s", ref.Message)
	}
}

// Two limiters with other scopes share the bucket without sharing a key.
func TestScopeKeepsKeysApart(t *testing.T) {
	t.Parallel()
	clk := newClock()
	srv := natstest.Start(t)
	rule := Rule{Name: "calls", Tool: "*", Bytes: 100, Window: Duration(time.Hour)}
	var ls []*Limiter
	for _, scope := range []string{"", "share."} {
		nc, err := nats.Connect(srv.URL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, _ := jetstream.New(nc)
		l, err := New(Config{Rules: []Rule{rule}, Scope: scope, WhenNATSDown: Closed,
			Assets: jsassets.Config{Storage: jsassets.StorageMemory, Profile: jsassets.ProfileDev}}, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		l.now = clk.now
		if err := l.Attach(t.Context(), nc, js); err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	ls[0].Charge("p", "x.y", 100)
	ls[0].Sync(t.Context())
	clk.add(time.Second)
	if _, ref := admit(t, ls[0], "p", "x.y", 0); ref == nil {
		t.Fatal("the charged limiter admits over its quota")
	}
	if _, ref := admit(t, ls[1], "p", "x.y", 0); ref != nil {
		t.Fatalf("the other scope shares the key: %s", ref.Message)
	}
}
