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
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
)

// Defaults of [Config].
const (
	DefaultListen            = "127.0.0.1:8080"
	DefaultTimeout           = 30 * time.Second
	DefaultMaxResultBytes    = 4 << 20
	DefaultIdempotencyTTL    = 24 * time.Hour
	DefaultIdempotencyBucket = "toolfleet_calls"
	DefaultEventStream       = "TOOLFLEET_CALL_EVENTS"
	DefaultEventQueue        = 10000
	DefaultShutdownTimeout   = 10 * time.Second
)

// ErrAuthOffNotLoopback is returned by [New] when auth is disabled on a listener
// that is not a loopback address.
var ErrAuthOffNotLoopback = errors.New("gateway: auth may only be disabled when listening on loopback")

// Config configures a [Gateway]. The zero value plus Auth.Disabled serves on
// 127.0.0.1:8080 with static workers only.
type Config struct {
	// Listen is the host:port of the single h2c port. Default [DefaultListen].
	Listen string
	// Workers are static worker addresses (host:port), e.g. k8s Service DNS names.
	Workers []string
	// NATSURL enables announcements, idempotency and events. Empty = none of them.
	NATSURL string
	// Auth configures bearer tokens.
	Auth AuthConfig
	// DefaultTimeout applies to tools whose contract sets none. Default [DefaultTimeout].
	DefaultTimeout time.Duration
	// MaxResultBytes applies to tools whose contract sets none. Default [DefaultMaxResultBytes].
	MaxResultBytes int64
	// IdempotencyTTL is how long finished results are kept. Default [DefaultIdempotencyTTL].
	IdempotencyTTL time.Duration
	// IdempotencyBucket names the KV bucket. Default [DefaultIdempotencyBucket].
	IdempotencyBucket string
	// IdempotencyFileStorage keeps results on disk (default: memory, which is
	// faster and enough for a cache whose loss only re-runs idempotent retries).
	IdempotencyFileStorage bool
	// EventStream names the JetStream stream of call events. Default [DefaultEventStream].
	EventStream string
	// EventQueue bounds the events held while NATS is away. Default [DefaultEventQueue].
	EventQueue int
	// AnnounceSweep is how often expired workers are dropped. Default 1s.
	AnnounceSweep time.Duration
	// ShutdownTimeout bounds the graceful stop. Default [DefaultShutdownTimeout].
	ShutdownTimeout time.Duration
	// Logger receives the gateway's logs. Default slog.Default().
	Logger *slog.Logger
	// Mounts are services served at the gateway's address (see [Mount]).
	Mounts []Mount
}

func (c *Config) defaults() {
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.DefaultTimeout <= 0 {
		c.DefaultTimeout = DefaultTimeout
	}
	if c.MaxResultBytes <= 0 {
		c.MaxResultBytes = DefaultMaxResultBytes
	}
	if c.IdempotencyTTL <= 0 {
		c.IdempotencyTTL = DefaultIdempotencyTTL
	}
	if c.IdempotencyBucket == "" {
		c.IdempotencyBucket = DefaultIdempotencyBucket
	}
	if c.EventStream == "" {
		c.EventStream = DefaultEventStream
	}
	if c.EventQueue <= 0 {
		c.EventQueue = DefaultEventQueue
	}
	if c.AnnounceSweep <= 0 {
		c.AnnounceSweep = time.Second
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Gateway is the fleet's front door. Create it with [New], then call [Gateway.Run].
type Gateway struct {
	cfg     Config
	log     *slog.Logger
	auth    *authenticator
	reg     *registry
	metrics *metrics
	idemPtr atomic.Pointer[idempotency]
	events  *events

	grpc   *grpc.Server
	health *health.Server

	ready   chan struct{}
	addr    atomic.Pointer[string]
	running atomic.Bool
}

// New validates cfg and prepares a gateway; it loads the JWKS when one is configured.
func New(ctx context.Context, cfg Config) (*Gateway, error) {
	cfg.defaults()
	if cfg.Auth.Disabled && !loopback(cfg.Listen) {
		return nil, fmt.Errorf("%w (listen %s)", ErrAuthOffNotLoopback, cfg.Listen)
	}
	auth, err := newAuthenticator(ctx, cfg.Auth)
	if err != nil {
		return nil, err
	}
	g := &Gateway{cfg: cfg, log: cfg.Logger.With("component", "gateway"), auth: auth, ready: make(chan struct{})}
	g.reg = newRegistry(g.log, 10*time.Second)
	g.metrics = newMetrics(func() float64 { return float64(len(g.reg.current().defs)) })
	g.grpc, g.health = g.newGRPCServer()
	return g, nil
}

// loopback reports whether a listen address binds only to loopback.
func loopback(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
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
		return fmt.Errorf("gateway: listen: %w", err)
	}
	addr := ln.Addr().String()
	g.addr.Store(&addr)
	if g.cfg.Auth.Disabled {
		g.log.Warn("AUTH IS OFF: every caller may call every tool (allowed because the gateway listens on loopback)", "addr", addr)
	}

	g.reg.keepStatic(ctx, g.cfg.Workers, 2*time.Second)
	var nc *nats.Conn
	var bg sync.WaitGroup
	if g.cfg.NATSURL != "" {
		nc, err = g.connectNATS(ctx, &bg)
		if err != nil {
			_ = ln.Close()
			return err
		}
	}

	srv := &http.Server{Handler: g.Handler(), ReadHeaderTimeout: 10 * time.Second}
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
	g.reg.close()
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

// connectNATS connects (retrying in the background when NATS is away) and starts
// announcements, idempotency and events.
func (g *Gateway) connectNATS(ctx context.Context, bg *sync.WaitGroup) (*nats.Conn, error) {
	nc, err := nats.Connect(g.cfg.NATSURL,
		nats.Name("toolfleet-gateway"),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			g.reg.markNATSDown()
			if err == nil {
				return // our own Close at stop
			}
			g.log.Warn("NATS disconnected; keeping the last known registry, queueing events", "error", err)
		}),
		nats.ReconnectHandler(func(*nats.Conn) { g.log.Info("NATS reconnected") }),
	)
	if err != nil {
		return nil, fmt.Errorf("gateway: NATS %s: %w", g.cfg.NATSURL, err)
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("gateway: JetStream: %w", err)
	}
	if err := g.reg.watchAnnouncements(ctx, nc, g.cfg.AnnounceSweep); err != nil {
		nc.Close()
		return nil, fmt.Errorf("gateway: subscribe to announcements: %w", err)
	}
	g.events = newEvents(g.log, nc, js, jetstream.StreamConfig{
		Name:        g.cfg.EventStream,
		Description: "toolfleet gateway call events",
		Subjects:    []string{EventSubjectPrefix + ">"},
		Storage:     jetstream.FileStorage,
		MaxAge:      7 * 24 * time.Hour,
		Duplicates:  2 * time.Minute,
	}, g.cfg.EventQueue, g.metrics)
	g.events.run(ctx)
	storage := jetstream.MemoryStorage
	if g.cfg.IdempotencyFileStorage {
		storage = jetstream.FileStorage
	}
	setup := func() bool {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		idem, err := newIdempotency(cctx, g.log, nc, js, g.cfg.IdempotencyBucket, g.cfg.IdempotencyTTL, storage)
		if err != nil {
			g.log.Warn("idempotency store not ready; calls run without it until it is", "error", err)
			return false
		}
		g.idemPtr.Store(idem)
		return true
	}
	if !nc.IsConnected() || !setup() {
		// The bucket needs NATS up: retry in the background until it is.
		bg.Go(func() { g.retryIdempotency(ctx, setup) })
	}
	return nc, nil
}

func (g *Gateway) retryIdempotency(ctx context.Context, setup func() bool) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
		if setup() {
			return
		}
	}
}

// idem returns the idempotency store; nil (a no-op) until NATS is configured and
// the bucket exists.
func (g *Gateway) idem() *idempotency { return g.idemPtr.Load() }
