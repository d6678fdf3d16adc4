package registry

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
)

// DefaultWarmUp is how long the registry counts as warming after it starts
// watching announcements (and after each NATS (re)connect, when it probes
// again): workers answer the discovery probe at once, so every connected
// worker's announcement arrives within a NATS round trip; two seconds leave a
// wide margin for a busy NATS or gateway, and for a worker that is itself one
// reconnect behind (sdk/tool reconnects every second). A worker that misses
// the probe still announces at its next heartbeat (5 s by default) and is then
// covered by its claim (see [Registry.Warm]).
const DefaultWarmUp = 2 * time.Second

// maxClaims bounds the announced-but-not-loaded workers remembered at once.
const maxClaims = 1024

// claim is an announced worker whose contracts are not loaded (yet): its
// load is running, failed, or was skipped (maxLoading). Until its lease ends,
// a tool id of a toolkit it names that does not resolve is Unavailable, not
// NotFound: the worker says it serves it, the gateway has not loaded it yet.
type claim struct {
	// toolkits are the lower-case toolkit names the announcement named; nil
	// when it named none (or one without a name): then it may serve anything.
	toolkits []string
	until    time.Time
	loading  bool
}

// warmth is what the registry does not know yet: the warm-up bound after a
// (re)connect and the announced workers not loaded yet. It has its own lock so
// that a resolution miss never waits for the registry's.
type warmth struct {
	mu sync.Mutex
	// until is the end of the current warm-up bound; while the bound runs, every
	// tool id that does not resolve is Unavailable. Zero: not watching.
	until time.Time
	// connected is false while the registry watches a NATS connection that is
	// not up yet: the bound starts at the connection.
	connected bool
	claims    map[string]claim // by address
	// warm is closed when the first warm-up ends: the bound has passed and no
	// announced worker's load is in progress.
	warm   chan struct{}
	warmed bool
}

func newWarmth() *warmth {
	return &warmth{claims: map[string]claim{}, warm: make(chan struct{}), connected: true}
}

// start begins a warm-up of d from now (connected), or one that begins only
// at the connection (not connected).
func (w *warmth) start(now time.Time, d time.Duration, connected bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.until, w.connected = now.Add(d), connected
}

// claim notes an announced worker that is not loaded.
func (w *warmth) claim(addr string, toolkits []string, until time.Time, loading bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.claims[addr]; !ok && len(w.claims) >= maxClaims {
		now := time.Now()
		for a, c := range w.claims {
			if !c.loading && now.After(c.until) {
				delete(w.claims, a)
			}
		}
		if len(w.claims) >= maxClaims {
			return
		}
	}
	w.claims[addr] = claim{toolkits: toolkits, until: until, loading: loading}
}

// forget forgets the claim of addr: its load succeeded, it was refused, or it left.
func (w *warmth) forget(addr string) {
	w.mu.Lock()
	delete(w.claims, addr)
	w.mu.Unlock()
}

// failed notes that the load of addr ended without a replica; its claim
// stays until its lease ends (the next heartbeat loads it again).
func (w *warmth) failed(addr string) {
	w.mu.Lock()
	if c, ok := w.claims[addr]; ok {
		c.loading = false
		w.claims[addr] = c
	}
	w.mu.Unlock()
}

// sweep drops claims whose lease ended.
func (w *warmth) sweep(now time.Time) {
	w.mu.Lock()
	for a, c := range w.claims {
		if !c.loading && now.After(c.until) {
			delete(w.claims, a)
		}
	}
	w.mu.Unlock()
}

// check closes warm once the first warm-up has ended; it reports whether the
// registry is warm now, and when not, when to look again (zero: at the end of
// a load).
func (w *warmth) check(now time.Time) (warm bool, again time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.until.IsZero() || !w.connected {
		return false, 0
	}
	if now.Before(w.until) {
		return false, w.until.Sub(now)
	}
	for _, c := range w.claims {
		if c.loading {
			return false, 0
		}
	}
	if !w.warmed {
		w.warmed = true
		close(w.warm)
	}
	return true, 0
}

// unready says why a tool id of toolkit that does not resolve may still be
// served soon: the registry is warming, or an announced worker that names the
// toolkit (or names none) is not loaded yet; "" when neither holds.
func (w *warmth) unready(toolkit string, now time.Time) (why, detail string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.until.IsZero() && (!w.connected || now.Before(w.until)) {
		return "the gateway is starting and has not loaded every worker's tools yet",
			fmt.Sprintf("registry warming up: it learns the workers from their announcements until %s", w.until.UTC().Format(time.RFC3339Nano))
	}
	toolkit = strings.ToLower(toolkit)
	for addr, c := range w.claims {
		if c.loading || !now.After(c.until) {
			if c.toolkits == nil || toolkit == "" || slices.Contains(c.toolkits, toolkit) {
				state := "its contracts are loading"
				if !c.loading {
					state = "its contracts could not be loaded yet"
				}
				return "a worker that serves it has announced itself and the gateway has not loaded it yet",
					fmt.Sprintf("worker %s announced it (%s)", addr, state)
			}
		}
	}
	return "", ""
}

// notLoaded is the Unavailable [ResolveError] of a tool id that may be served
// once the registry is warm, or nil.
func (w *warmth) notLoaded(toolID, toolkit string) *ResolveError {
	if w == nil {
		return nil
	}
	why, detail := w.unready(toolkit, time.Now())
	if why == "" {
		return nil
	}
	return &ResolveError{Code: codes.Unavailable, Detail: detail,
		Message: fmt.Sprintf("tool %q is not available yet: %s; try again shortly", toolID, why)}
}
