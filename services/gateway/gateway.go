package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/toolfleet/toolfleet/internal/loopback"
	"github.com/toolfleet/toolfleet/services/gateway/auth"
	"github.com/toolfleet/toolfleet/services/gateway/clientinput"
	"github.com/toolfleet/toolfleet/services/gateway/idempotency"
	"github.com/toolfleet/toolfleet/services/gateway/ratelimit"
	"github.com/toolfleet/toolfleet/services/gateway/registry"
	"github.com/toolfleet/toolfleet/services/gateway/results"
)

// Gateway is the fleet's front door. Create it with [New], then call [Gateway.Run].
type Gateway struct {
	cfg     Config
	log     *slog.Logger
	auth    *auth.Authenticator
	reg     *registry.Registry
	metrics *metrics
	idemPtr atomic.Pointer[idempotency.Store]
	// sealer seals request_state; nil until the shared key is read.
	sealer atomic.Pointer[clientinput.Sealer]
	// resultsPtr is the store of result handles; nil until NATS is configured
	// and the bucket exists.
	resultsPtr atomic.Pointer[results.Store]
	// handleSlots holds one token per call in flight that allowed a handle
	// (Config.ResultHandleCalls).
	handleSlots chan struct{}
	events      *events
	// limits is nil when no rule is configured.
	limits *ratelimit.Limiter
	// shares is nil when the store shares are off or there is no NATS.
	shares *storeShares
	cop    *http.CrossOriginProtection
	// lastIdemWarn rate-limits the warning while the idempotency store is away (unix nanos).
	lastIdemWarn atomic.Int64

	grpc   *grpc.Server
	health *health.Server

	// fatalErr carries a configuration error found after Run started
	// (see fatal); Run returns it.
	fatalErr chan error
	// setupErr is the last error of setting up the JetStream assets (nil
	// once they are ready); see SetupError.
	setupErr atomic.Pointer[error]
	// assetsReady and registryWarm are the two halves of readiness with NATS
	// (see markReady): the JetStream assets exist, the registry's first
	// warm-up has ended.
	assetsReady, registryWarm atomic.Bool

	ready   chan struct{}
	addr    atomic.Pointer[string]
	running atomic.Bool
}

// New validates cfg and prepares a gateway; it loads the JWKS when one is
// configured, and refreshes a JWKS URL until ctx ends (pass a context that lives
// as long as the gateway).
func New(ctx context.Context, cfg Config) (*Gateway, error) {
	cfg.defaults()
	if cfg.Auth.Disabled && !loopback.Listen(cfg.Listen) {
		return nil, fmt.Errorf("%w (listen %s)", ErrAuthOffNotLoopback, cfg.Listen)
	}
	if err := cfg.Assets.Validate(); err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	if cfg.NATSURL != "" {
		// Reads the credential and certificate files: fail now, not at each reconnect.
		if _, err := cfg.NATS.NATSOptions(); err != nil {
			return nil, fmt.Errorf("gateway: %w", err)
		}
		// A result at the ceiling must fit the bucket: fail now, not at a call.
		rc := cfg.ResultsConfig()
		if err := rc.Defaults(); err != nil {
			return nil, fmt.Errorf("gateway: %w", err)
		}
	}
	log := cfg.Logger.With("component", "gateway")
	authn, err := auth.New(ctx, log, cfg.Auth)
	if err != nil {
		return nil, err
	}
	g := &Gateway{cfg: cfg, log: log, auth: authn, ready: make(chan struct{}), fatalErr: make(chan error, 1), handleSlots: make(chan struct{}, cfg.ResultHandles.Calls)}
	if g.cop, err = g.newCrossOrigin(); err != nil {
		return nil, err
	}
	dial, err := cfg.WorkerTLS.DialOption()
	if err != nil {
		return nil, err
	}
	g.reg = registry.New(g.log, 10*time.Second, append([]grpc.DialOption{dial, grpc.WithMaxHeaderListSize(maxWorkerHeaderBytes)}, g.workerTraceOptions()...)...)
	g.reg.AcceptAdditive(cfg.AcceptAdditiveContracts)
	g.metrics = newMetrics(func() float64 { return float64(len(g.reg.Current().Defs())) })
	g.metrics.reg.MustRegister(g.reg.Rejections())
	lc := cfg.Limits
	lc.Assets, lc.Standalone = cfg.Assets, cfg.NATSURL == ""
	if g.limits, err = ratelimit.New(lc, log); err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	if g.limits != nil {
		g.metrics.reg.MustRegister(g.limits.Collectors()...)
	}
	if g.shares, err = newStoreShares(cfg, log, g.metrics); err != nil {
		return nil, err
	}
	switch {
	case len(cfg.ClientInput.Key) > 0:
		sl, err := clientinput.New(cfg.ClientInput.Key)
		if err != nil {
			return nil, fmt.Errorf("gateway: ClientInput.Key: %w", err)
		}
		g.sealer.Store(sl)
	case cfg.NATSURL == "":
		sl, _ := clientinput.New(clientinput.RandomKey())
		g.sealer.Store(sl)
		log.Info("request_state of tools asking for input is sealed with a key of this process: run one gateway, or give every replica the same --input-state-key-file")
	}
	g.grpc, g.health = g.newGRPCServer()
	return g, nil
}

// Ready is closed once Run listens; Addr is valid from then on.
func (g *Gateway) Ready() <-chan struct{} { return g.ready }

// Addr is the address the gateway listens on, or "" before Run listens.
func (g *Gateway) Addr() string {
	if a := g.addr.Load(); a != nil {
		return *a
	}
	return ""
}

// Run serves until ctx is done, then stops within ShutdownTimeout. NATS being
// away never stops it: announcements, idempotency and events resume when it returns.
func (g *Gateway) Run(ctx context.Context) error {
	if !g.running.CompareAndSwap(false, true) {
		return errors.New("gateway: already running")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ln, err := net.Listen("tcp", g.cfg.Listen)
	if err != nil {
		return fmt.Errorf("gateway: %w", err) // net says "listen tcp ADDR: …"
	}
	addr := ln.Addr().String()
	g.addr.Store(&addr)
	if g.cfg.Auth.Disabled {
		g.log.Warn("AUTH IS OFF: every caller may call every tool (allowed because the gateway listens on loopback)", "addr", addr)
	}

	g.reg.KeepStatic(ctx, g.cfg.Workers, 2*time.Second)
	var nc *nats.Conn
	var bg sync.WaitGroup
	if g.limits != nil {
		bg.Go(func() { g.limits.Run(ctx) }) // stops (giving back its slots) before NATS closes
	}
	if g.shares != nil {
		bg.Go(func() { g.shares.run(ctx) }) // writes its last counts before NATS closes
	}
	if g.cfg.NATSURL != "" {
		nc, err = g.connectNATS(ctx, &bg)
		if err != nil {
			_ = ln.Close()
			cancel()
			bg.Wait()
			return err
		}
	}

	srv := &http.Server{Handler: g.Handler(), ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: maxHeaderBytes,
		HTTP2: &http.HTTP2Config{MaxConcurrentStreams: int(g.cfg.MaxConcurrentStreams)}}
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	sp := newSplitter(ln)
	serveErr := make(chan error, 3)
	var servers sync.WaitGroup
	servers.Go(sp.serve)
	servers.Go(func() { serveErr <- g.grpc.Serve(sp.grpc) })
	servers.Go(func() { serveErr <- srv.Serve(sp.http) })
	close(g.ready)
	g.log.Info("gateway serving", "addr", addr, "static_workers", len(g.cfg.Workers), "nats", g.cfg.NATSURL != "")

	select {
	case <-ctx.Done():
	case err = <-serveErr:
	case err = <-g.fatalErr:
	}
	g.health.Shutdown() // NOT_SERVING: probes stop sending traffic while calls drain
	sp.close()
	stopCtx, stop := context.WithTimeout(context.WithoutCancel(ctx), g.cfg.ShutdownTimeout)
	defer stop()
	g.stopGRPC(stopCtx)
	if serr := srv.Shutdown(stopCtx); serr != nil {
		_ = srv.Close()
	}
	servers.Wait()
	cancel()
	g.events.wait()
	bg.Wait()
	g.reg.Close()
	if nc != nil {
		nc.Close()
	}
	if errors.Is(err, http.ErrServerClosed) || errors.Is(err, grpc.ErrServerStopped) {
		err = nil
	}
	return err
}

// stopGRPC stops the gRPC server gracefully, cutting calls still running at the bound.
func (g *Gateway) stopGRPC(ctx context.Context) {
	done := make(chan struct{})
	go func() { defer close(done); g.grpc.GracefulStop() }()
	select {
	case <-done:
	case <-ctx.Done():
		g.grpc.Stop()
		<-done
	}
}

// SetupError is the last error met while creating the idempotency bucket and
// the event stream, which readiness waits for; nil when there was none or
// they are ready. A caller that starts a gateway in process (toolfleet dev)
// uses it to stop early on errors a retry will not mend, such as
// jsassets.ErrInsufficientStorage.
func (g *Gateway) SetupError() error {
	if p := g.setupErr.Load(); p != nil {
		return *p
	}
	return nil
}

// Serving reports whether the gateway as a whole is ready (what
// grpc.health.v1 answers for the service "" and OXP's GET /health).
func (g *Gateway) Serving() bool {
	resp, err := g.health.Check(context.Background(), &healthpb.HealthCheckRequest{})
	return err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING
}

// LimitsShared reports whether the rate limits share their state through
// NATS (false while the bucket is not ready or NATS is away, when
// Limits.WhenNATSDown applies); true when no limit is configured.
func (g *Gateway) LimitsShared() bool { return g.limits == nil || g.limits.Shared() }

// WorkerAdmission says whether the worker at addr joined the registry (takes
// calls) or was refused for a contract conflict; neither while it is
// unknown, loading or leaving (registry.Registry.Admission).
func (g *Gateway) WorkerAdmission(addr string) (joined, refused bool) { return g.reg.Admission(addr) }

// idem returns the idempotency store; nil (unavailable) until NATS is configured
// and the bucket exists.
func (g *Gateway) idem() *idempotency.Store { return g.idemPtr.Load() }
