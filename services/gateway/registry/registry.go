package registry

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/tool/contract"
)

// Replica is one reachable worker process serving some tools.
type Replica struct {
	addr   string
	id     string
	static bool
	conn   *grpc.ClientConn
	// Set once the contracts are loaded; a worker without them serves nothing yet.
	contracts *contract.Contracts
	defs      []*toolfleetv1.ToolDefinition
	// expires is when an announced worker is dropped unless it announces again.
	expires time.Time
	ttl     time.Duration
	// sig names the announced toolkits and versions, to notice a redeployment.
	sig string
	// digests holds the contract digest of each served toolkit, by "Toolkit@x.y.z".
	digests map[string]string
	// draining is set once the replica announced DRAINING or NOT_SERVING: it is
	// leaving, takes no new calls ([Route.Pick] skips it), and keeps its tools
	// known until its lease runs out, so that a call in the window gets a
	// retryable Unavailable instead of NotFound.
	draining atomic.Bool
	// journal is set for a worker that announced call_journal: it records a
	// claimed call's start and answer (package sdk/tool/journal).
	journal bool
}

// CallJournal reports whether the replica keeps the call journal.
func (w *Replica) CallJournal() bool { return w.journal }

// Draining reports whether the replica is leaving (announced DRAINING or NOT_SERVING).
func (w *Replica) Draining() bool { return w.draining.Load() }

// Addr is the address the gateway dials.
func (w *Replica) Addr() string { return w.addr }

// Conn is the gateway's connection to the replica.
func (w *Replica) Conn() *grpc.ClientConn { return w.conn }

// Registry tracks workers and the tools they serve. Its zero value is not
// usable; create one with [New] and stop it with [Registry.Close].
type Registry struct {
	log      *slog.Logger
	dialOpts []grpc.DialOption
	fetchTO  time.Duration

	mu      sync.Mutex
	workers map[string]*Replica // by address
	loading map[string]bool
	// graceUntil delays expiry after NATS comes back, so workers can re-announce.
	graceUntil time.Time
	// closed stops new background work once close has begun.
	closed bool
	natsUp func() bool

	snap atomic.Pointer[Snapshot]
	quit chan struct{}
	wg   sync.WaitGroup
	// changed is signalled (non-blocking) after every rebuild; tests wait on it.
	changed chan struct{}

	// rejected remembers replicas refused for a contract conflict, by address, so
	// that their heartbeats do not cost a reflection fetch (and a log line) each.
	rejected map[string]rejection
	// rejections counts refused replicas (toolfleet_gateway_registry_rejected_total).
	rejections prometheus.Counter
	// skipped counts announcements skipped because maxLoading loads were running.
	skipped uint64

	// warm is what the registry does not know yet (warm.go); nc and warmUp are
	// set by WatchAnnouncements, to probe again at a NATS (re)connect.
	warm   *warmth
	nc     *nats.Conn
	warmUp time.Duration

	// additive lets a contract that only adds tools join (additive.go).
	additive atomic.Bool
}

// rejection is a replica refused because its contract differs from the
// registered one of a Toolkit@version.
type rejection struct {
	sig   string
	until time.Time
}

// Bounds of the memory of rejected replicas.
const (
	rejectionMemory = time.Minute
	maxRejections   = 1024
)

// maxLoading bounds the contract loads (a dial and a reflection fetch each) of
// announced workers in flight at once: a flood of announcements naming new
// addresses costs at most this many connections; the others are skipped until a
// heartbeat repeats them. Static workers (configuration) always load.
const maxLoading = 32

// New returns an empty registry. Workers are dialed with dialOpts (transport
// credentials; plain text when none), and each worker's contracts must be
// fetched by reflection within fetchTimeout.
func New(log *slog.Logger, fetchTimeout time.Duration, dialOpts ...grpc.DialOption) *Registry {
	if len(dialOpts) == 0 {
		dialOpts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	r := &Registry{
		log:      log,
		fetchTO:  fetchTimeout,
		workers:  map[string]*Replica{},
		loading:  map[string]bool{},
		natsUp:   func() bool { return true },
		changed:  make(chan struct{}, 1),
		rejected: map[string]rejection{},
		rejections: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "toolfleet_gateway_registry_rejected_total",
			Help: "Worker replicas refused because their contract differs from the registered one of the same Toolkit@version.",
		}),
		quit:     make(chan struct{}),
		dialOpts: dialOpts,
		warm:     newWarmth(),
	}
	r.snap.Store(buildSnapshot(nil, r.warm))
	return r
}

// Current returns the registry's present view; it never changes once returned.
func (r *Registry) Current() *Snapshot { return r.snap.Load() }

// Rejections counts replicas refused for a contract conflict
// (toolfleet_gateway_registry_rejected_total); register it with the gateway's metrics.
func (r *Registry) Rejections() prometheus.Collector { return r.rejections }

// add registers a worker at addr (static, or announced with a ttl and the
// toolkits it names, nil when unknown) and loads its contracts in the background. A known address only has its lease renewed, unless
// it now announces other toolkits (sig, "" = unknown) or was draining: then its
// contracts are loaded again, e.g. after a new version was deployed, or the
// process restarted, at the same address.
func (r *Registry) add(ctx context.Context, addr, id, sig string, toolkits []string, static, journal bool, ttl time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	if w, ok := r.workers[addr]; ok && (sig == "" || sig == w.sig) && !w.draining.Load() {
		w.expires, w.ttl = time.Now().Add(ttl), ttl
		w.static = w.static || static
		return
	}
	if r.loading[addr] {
		return
	}
	if rj, ok := r.rejected[addr]; ok && rj.sig == sig && time.Now().Before(rj.until) {
		return // refused a moment ago for the same claim
	}
	if len(r.loading) >= maxLoading && !static {
		// Announced but not loaded: its tools are Unavailable, not NotFound, until
		// a heartbeat repeats it (or its lease ends).
		r.warm.claim(addr, toolkits, time.Now().Add(ttl), false)
		r.skipped++
		if r.skipped == 1 || r.skipped%1000 == 0 {
			r.log.Warn("too many workers loading at once; announcement skipped until it repeats",
				"addr", addr, "loading", len(r.loading), "skipped_total", r.skipped)
		}
		return
	}
	r.loading[addr] = true
	if !static {
		r.warm.claim(addr, toolkits, time.Now().Add(ttl), true)
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		w, err := r.load(ctx, addr, id, static, ttl)
		r.mu.Lock()
		delete(r.loading, addr)
		if err != nil {
			r.warm.failed(addr)
			r.mu.Unlock()
			r.log.Warn("worker contracts not loaded; will retry", "addr", addr, "error", err)
			return
		}
		w.sig, w.journal = sig, journal
		// Loaded, refused or given up: either way no longer a claim. Forgotten
		// only after the new snapshot is published, so that a resolution always
		// sees the claim or the replica.
		defer r.warm.forget(addr)
		if ctx.Err() != nil {
			r.mu.Unlock()
			_ = w.conn.Close()
			return
		}
		if conflict := r.conflictLocked(w); conflict != nil {
			r.rejectLocked(w)
			if old, ok := r.workers[addr]; ok {
				// The process at this address no longer serves what it registered.
				r.dropLocked(old, "now serves another contract")
			}
			r.mu.Unlock()
			_ = w.conn.Close()
			r.rejections.Inc()
			r.log.Warn("worker refused: its contract differs from the registered one of the same toolkit version; the registered replicas keep serving",
				"addr", addr, "id", id, "toolkit", conflict.toolkit, "digest", conflict.got, "registered_digest", conflict.want, "registered_by", conflict.by)
			return
		}
		if err := r.mcpClashLocked(w); err != nil {
			r.rejectLocked(w)
			if old, ok := r.workers[addr]; ok {
				r.dropLocked(old, "now claims an MCP name another tool shows")
			}
			r.mu.Unlock()
			_ = w.conn.Close()
			r.rejections.Inc()
			r.log.Warn("worker refused: a tool of it would be shown to MCP clients under the name of another served tool; the served tool keeps its name",
				"addr", addr, "id", id, "error", err)
			return
		}
		delete(r.rejected, addr)
		if old, ok := r.workers[addr]; ok {
			r.dropLocked(old, "contracts reloaded")
		}
		// Leaving replicas whose contract differs make way for the new one: they
		// take no calls and would only hold a stale definition of the tool.
		for _, o := range r.workers {
			if o.draining.Load() && conflicts(o, w) {
				r.dropLocked(o, "replaced by a replica with another contract of the same version")
			}
		}
		r.workers[addr] = w
		r.rebuildLocked()
		r.mu.Unlock()
		r.log.Info("worker joined", "addr", addr, "id", id, "tools", len(w.defs), "static", static)
	}()
}

// load dials a worker and loads its contracts by reflection.
func (r *Registry) load(ctx context.Context, addr, id string, static bool, ttl time.Duration) (*Replica, error) {
	conn, err := grpc.NewClient(addr, r.dialOpts...)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	fctx, cancel := context.WithTimeout(ctx, r.fetchTO)
	defer cancel()
	c, err := contract.Fetch(fctx, conn)
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("worker %s: %w", addr, err)
	}
	defs, err := c.Definitions()
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("worker %s: %w", addr, err)
	}
	digests := make(map[string]string, len(c.Services))
	for _, sd := range c.Services {
		tk := contract.ToolkitOf(sd)
		d, err := contract.Digest(sd)
		if err != nil {
			_ = conn.Close()
			return nil, fmt.Errorf("worker %s: %w", addr, err)
		}
		digests[tk.Name+"@"+tk.Version] = d
	}
	return &Replica{addr: addr, id: id, static: static, conn: conn, contracts: c, defs: defs,
		expires: time.Now().Add(ttl), ttl: ttl, digests: digests}, nil
}

// rejectLocked remembers a refused replica for a while, within a bound.
func (r *Registry) rejectLocked(w *Replica) {
	now := time.Now()
	if len(r.rejected) >= maxRejections {
		for a, rj := range r.rejected {
			if now.After(rj.until) {
				delete(r.rejected, a)
			}
		}
	}
	if len(r.rejected) < maxRejections {
		r.rejected[w.addr] = rejection{sig: w.sig, until: now.Add(rejectionMemory)}
	}
}

// KeepStatic (re)adds static workers that are not loaded, e.g. because they were
// not up yet when the gateway started, every interval until ctx is done.
func (r *Registry) KeepStatic(ctx context.Context, addrs []string, interval time.Duration) {
	add := func() {
		for _, a := range addrs {
			r.add(ctx, a, "static:"+a, "", nil, true, false, 0)
		}
	}
	add()
	r.wg.Go(func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				add()
			}
		}
	})
}

// leave marks an announced worker as leaving (DRAINING or NOT_SERVING): it takes
// no new calls and its tools stay known until its lease, renewed to ttl from
// now, runs out; then [Registry.expire] drops it, and with the last replica of
// a tool the tool goes. Static workers ignore announcements.
func (r *Registry) leave(addr string, ttl time.Duration, health string) {
	r.warm.forget(addr) // a worker leaving before it was loaded claims nothing
	r.mu.Lock()
	defer r.mu.Unlock()
	w, ok := r.workers[addr]
	if !ok || w.static {
		return
	}
	w.expires, w.ttl = time.Now().Add(ttl), ttl
	if !w.draining.Swap(true) {
		r.log.Info("worker draining; its tools stay known until its lease runs out", "addr", addr, "id", w.id,
			"health", health, "lease", ttl.String())
		r.rebuildLocked()
	}
}

func (r *Registry) dropLocked(w *Replica, why string) {
	delete(r.workers, w.addr)
	r.rebuildLocked()
	if r.closed {
		_ = w.conn.Close()
		return
	}
	// Close later: calls that picked this conn a moment ago may still be running.
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		t := time.NewTimer(30 * time.Second)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.quit:
		}
		_ = w.conn.Close()
	}()
	r.log.Info("worker left", "addr", w.addr, "id", w.id, "why", why)
}

// reconnectGrace is the least time a worker gets to announce again after NATS comes
// back: workers reconnect on their own schedule (sdk/tool retries every second, with
// jitter), so a short announced ttl alone would drop healthy workers that are merely
// a reconnect behind the gateway.
const reconnectGrace = 5 * time.Second

// expire drops announced workers whose lease ran out. While NATS is away nothing
// expires (the last known registry is kept); after it returns, workers get one
// ttl, and at least reconnectGrace, to announce again.
func (r *Registry) expire(now time.Time) {
	r.warm.sweep(now)
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.natsUp() {
		r.graceUntil = time.Time{}
		return
	}
	if r.graceUntil.IsZero() {
		r.graceUntil = now
		for _, w := range r.workers {
			if lease := now.Add(max(w.ttl, reconnectGrace)); !w.static && w.expires.Before(lease) {
				w.expires = lease
			}
		}
	}
	for _, w := range r.workers {
		if !w.static && now.After(w.expires) {
			r.dropLocked(w, "announcements stopped")
		}
	}
}

// MarkNATSDown resets the grace logic so that expiry restarts after reconnection.
func (r *Registry) MarkNATSDown() {
	r.mu.Lock()
	r.graceUntil = time.Time{}
	r.mu.Unlock()
}

func (r *Registry) rebuildLocked() {
	ws := make([]*Replica, 0, len(r.workers))
	for _, w := range r.workers {
		ws = append(ws, w)
	}
	slices.SortFunc(ws, func(a, b *Replica) int { return cmp.Compare(a.addr, b.addr) })
	r.snap.Store(buildSnapshot(ws, r.warm))
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

// Close stops background work and closes every connection.
func (r *Registry) Close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	close(r.quit)
	r.wg.Wait()
	r.mu.Lock()
	ws := r.workers
	r.workers = map[string]*Replica{}
	r.mu.Unlock()
	for _, w := range ws {
		_ = w.conn.Close()
	}
}
