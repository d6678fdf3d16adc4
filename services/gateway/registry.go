package gateway

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/reflect/protoreflect"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/tool/contract"
	"github.com/toolfleet/toolfleet/services/gateway/search"
)

// worker is one reachable worker process (a replica).
type worker struct {
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
}

// route is one served tool version and the replicas that serve it.
type route struct {
	def      *toolfleetv1.ToolDefinition
	method   protoreflect.MethodDescriptor
	replicas []*worker
	next     atomic.Uint64
}

// snapshot is an immutable view of the registry, rebuilt on every change.
type snapshot struct {
	routes map[string]*route // by id "Toolkit.Tool@x.y.z"
	defs   []*toolfleetv1.ToolDefinition
	// byName holds every version of "Toolkit.Tool".
	byName map[string][]*toolfleetv1.ToolDefinition
	index  *search.Index
	// resolved caches resolutions by canonical reference (contract.ToolRef.String → *route).
	resolved sync.Map
}

// registry tracks workers and the tools they serve.
type registry struct {
	log      *slog.Logger
	dialOpts []grpc.DialOption
	fetchTO  time.Duration

	mu      sync.Mutex
	workers map[string]*worker // by address
	loading map[string]bool
	// graceUntil delays expiry after NATS comes back, so workers can re-announce.
	graceUntil time.Time
	// closed stops new background work once close has begun.
	closed bool
	natsUp func() bool

	snap atomic.Pointer[snapshot]
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

func newRegistry(log *slog.Logger, fetchTimeout time.Duration) *registry {
	r := &registry{
		log:      log,
		fetchTO:  fetchTimeout,
		workers:  map[string]*worker{},
		loading:  map[string]bool{},
		natsUp:   func() bool { return true },
		changed:  make(chan struct{}, 1),
		rejected: map[string]rejection{},
		rejections: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "toolfleet_gateway_registry_rejected_total",
			Help: "Worker replicas refused because their contract differs from the registered one of the same Toolkit@version.",
		}),
		quit:     make(chan struct{}),
		dialOpts: []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())},
	}
	r.snap.Store(buildSnapshot(nil))
	return r
}

// current returns the registry's present view.
func (r *registry) current() *snapshot { return r.snap.Load() }

// add registers a worker at addr (static, or announced with a ttl) and loads its
// contracts in the background. A known address only has its lease renewed, unless
// it now announces other toolkits (sig, "" = unknown): then its contracts are
// loaded again, e.g. after a new version was deployed at the same address.
func (r *registry) add(ctx context.Context, addr, id, sig string, static bool, ttl time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	if w, ok := r.workers[addr]; ok && (sig == "" || sig == w.sig) {
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
		r.skipped++
		if r.skipped == 1 || r.skipped%1000 == 0 {
			r.log.Warn("too many workers loading at once; announcement skipped until it repeats",
				"addr", addr, "loading", len(r.loading), "skipped_total", r.skipped)
		}
		return
	}
	r.loading[addr] = true
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		w, err := r.load(ctx, addr, id, static, ttl)
		r.mu.Lock()
		delete(r.loading, addr)
		if err != nil {
			r.mu.Unlock()
			r.log.Warn("worker contracts not loaded; will retry", "addr", addr, "error", err)
			return
		}
		w.sig = sig
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
		delete(r.rejected, addr)
		if old, ok := r.workers[addr]; ok {
			r.dropLocked(old, "contracts changed")
		}
		r.workers[addr] = w
		r.rebuildLocked()
		r.mu.Unlock()
		r.log.Info("worker joined", "addr", addr, "id", id, "tools", len(w.defs), "static", static)
	}()
}

// load dials a worker and loads its contracts by reflection.
func (r *registry) load(ctx context.Context, addr, id string, static bool, ttl time.Duration) (*worker, error) {
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
	return &worker{addr: addr, id: id, static: static, conn: conn, contracts: c, defs: defs,
		expires: time.Now().Add(ttl), ttl: ttl, digests: digests}, nil
}

// contractConflict names a Toolkit@version that a new replica serves with another
// contract than the replicas already registered for it.
type contractConflict struct {
	toolkit   string
	got, want string
	by        string // address of a registered replica
}

// conflictLocked reports the first toolkit version w serves with a contract that
// differs from the one registered for it. The registered contract is the one the
// replicas already serving that version have (the first to join set it); a
// replica at the same address is being replaced and does not count.
func (r *registry) conflictLocked(w *worker) *contractConflict {
	keys := slices.Sorted(maps.Keys(w.digests))
	for _, k := range keys {
		for _, o := range r.workers {
			if o.addr == w.addr {
				continue
			}
			if d, ok := o.digests[k]; ok && d != w.digests[k] {
				return &contractConflict{toolkit: k, got: w.digests[k], want: d, by: o.addr}
			}
		}
	}
	return nil
}

// rejectLocked remembers a refused replica for a while, within a bound.
func (r *registry) rejectLocked(w *worker) {
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

// keepStatic (re)adds static workers that are not loaded, e.g. because they were
// not up yet when the gateway started, every interval until ctx is done.
func (r *registry) keepStatic(ctx context.Context, addrs []string, interval time.Duration) {
	add := func() {
		for _, a := range addrs {
			r.add(ctx, a, "static:"+a, "", true, 0)
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

// remove drops an announced worker (static workers stay).
func (r *registry) remove(addr string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	w, ok := r.workers[addr]
	if !ok || w.static {
		return
	}
	r.dropLocked(w, "stopped serving")
}

func (r *registry) dropLocked(w *worker, why string) {
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
func (r *registry) expire(now time.Time) {
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

// markNATSDown resets the grace logic so that expiry restarts after reconnection.
func (r *registry) markNATSDown() {
	r.mu.Lock()
	r.graceUntil = time.Time{}
	r.mu.Unlock()
}

func (r *registry) rebuildLocked() {
	ws := make([]*worker, 0, len(r.workers))
	for _, w := range r.workers {
		ws = append(ws, w)
	}
	slices.SortFunc(ws, func(a, b *worker) int { return cmp.Compare(a.addr, b.addr) })
	r.snap.Store(buildSnapshot(ws))
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

func buildSnapshot(ws []*worker) *snapshot {
	s := &snapshot{routes: map[string]*route{}, byName: map[string][]*toolfleetv1.ToolDefinition{}}
	for _, w := range ws {
		for _, d := range w.defs {
			rt, ok := s.routes[d.GetId()]
			if !ok {
				md, found := w.contracts.Method(d.GetGrpcMethod())
				if !found {
					continue
				}
				rt = &route{def: d, method: md}
				s.routes[d.GetId()] = rt
				s.defs = append(s.defs, d)
				name := d.GetToolkit() + "." + d.GetName()
				s.byName[name] = append(s.byName[name], d)
			}
			rt.replicas = append(rt.replicas, w)
		}
	}
	slices.SortFunc(s.defs, func(a, b *toolfleetv1.ToolDefinition) int { return cmp.Compare(a.GetId(), b.GetId()) })
	s.index = search.New(s.defs)
	return s
}

// pick returns replicas in round-robin order, ready ones first, so a caller can
// fall back to the next one.
func (rt *route) pick() []*worker {
	n := len(rt.replicas)
	start := int(rt.next.Add(1) % uint64(n))
	out := make([]*worker, 0, n)
	var down []*worker
	for i := range n {
		w := rt.replicas[(start+i)%n]
		switch w.conn.GetState() {
		case connectivity.TransientFailure, connectivity.Shutdown:
			down = append(down, w)
		default:
			out = append(out, w)
		}
	}
	return append(out, down...)
}

// close stops background work and closes every connection.
func (r *registry) close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	close(r.quit)
	r.wg.Wait()
	r.mu.Lock()
	ws := r.workers
	r.workers = map[string]*worker{}
	r.mu.Unlock()
	for _, w := range ws {
		_ = w.conn.Close()
	}
}
