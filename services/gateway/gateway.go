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
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/toolfleet/toolfleet/sdk/jsassets"
	"github.com/toolfleet/toolfleet/sdk/natsconn"
	"github.com/toolfleet/toolfleet/services/gateway/auth"
	"github.com/toolfleet/toolfleet/services/gateway/clientinput"
	"github.com/toolfleet/toolfleet/services/gateway/idempotency"
	"github.com/toolfleet/toolfleet/services/gateway/mcp"
	"github.com/toolfleet/toolfleet/services/gateway/ratelimit"
	"github.com/toolfleet/toolfleet/services/gateway/registry"
	"github.com/toolfleet/toolfleet/services/gateway/results"
)

// Defaults of [Config].
const (
	DefaultListen            = "127.0.0.1:8080"
	DefaultTimeout           = 30 * time.Second
	DefaultMaxResultBytes    = 4 << 20
	DefaultIdempotencyTTL    = idempotency.DefaultTTL
	DefaultIdempotencyBucket = idempotency.DefaultBucket
	// DefaultIdempotencyMaxBytes bounds the idempotency bucket (256 MiB).
	DefaultIdempotencyMaxBytes = idempotency.DefaultMaxBytes
	// DefaultIdempotencyMaxValueSize bounds one stored response (1 MiB).
	DefaultIdempotencyMaxValueSize = idempotency.DefaultMaxValueSize
	// DefaultResultBucket names the object store of result handles.
	DefaultResultBucket = results.DefaultBucket
	// DefaultResultTTL is how long a result behind a handle is kept (1 h).
	DefaultResultTTL = results.DefaultTTL
	// DefaultResultMaxBytes is the ceiling on one result behind a handle (64 MiB).
	DefaultResultMaxBytes = results.DefaultMaxResultBytes
	// DefaultResultHandleCalls bounds the calls at once that may receive a
	// result as large as ResultMaxBytes.
	DefaultResultHandleCalls = 8
	// DefaultResultStoreMaxBytes bounds the result handles' bucket (1 GiB).
	DefaultResultStoreMaxBytes = results.DefaultMaxBytes
	DefaultEventStream         = "TOOLFLEET_CALL_EVENTS"
	// DefaultWarmUp: see Config.WarmUp.
	DefaultWarmUp = registry.DefaultWarmUp
	// DefaultStartedEventAfter: a call still running after this publishes a
	// started event; a faster one publishes only its terminal event.
	DefaultStartedEventAfter = 100 * time.Millisecond
	DefaultEventQueue        = 10000
	// DefaultClientInputTTL: a caller answers a tool's questions within this.
	DefaultClientInputTTL  = 15 * time.Minute
	DefaultShutdownTimeout = 10 * time.Second
	// DefaultMaxRequestBytes bounds one request on every surface (limits.go).
	DefaultMaxRequestBytes = 4 << 20
	// DefaultMaxInputValues bounds the JSON values of one JSON request.
	DefaultMaxInputValues = 100_000
	// DefaultMaxBatchCalls bounds the calls of one CallTools request.
	DefaultMaxBatchCalls = 100
	// DefaultBatchParallelism bounds the calls of one CallTools request running at once.
	DefaultBatchParallelism = 8
	// DefaultMaxConcurrentStreams bounds the RPCs in flight on one gRPC connection.
	DefaultMaxConcurrentStreams = 256
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
	// NATSURL enables announcements, idempotency and events. Empty = none of them
	// (a call_id is then only passed to the worker).
	NATSURL string
	// NATS holds the credentials and TLS settings for NATSURL (none by default).
	NATS natsconn.Options
	// WorkerTLS says how to dial workers: plain text by default, TLS or mTLS.
	WorkerTLS WorkerTLSConfig
	// Auth configures bearer tokens.
	Auth AuthConfig
	// DefaultTimeout applies to tools whose contract sets none. Default [DefaultTimeout].
	DefaultTimeout time.Duration
	// MaxResultBytes applies to tools whose contract sets none. Default [DefaultMaxResultBytes].
	MaxResultBytes int64
	// Assets sets the replicas, storage, byte bounds and retention of the
	// gateway's JetStream assets (the call-event stream, the idempotency
	// bucket, the result handles' object store); see package sdk/jsassets.
	// Zero: one replica on file storage with the prod profile. The fields
	// below that set one of these values win over the profile and lose to
	// an override that names the asset.
	Assets jsassets.Config
	// Idempotency configures the record of calls by call_id (package
	// idempotency). Its zero bucket fields (Bucket, TTL, MaxBytes, Replicas)
	// take the settings of the toolfleet_calls asset under Assets; a field it
	// sets wins over the profile and loses to an override that names the
	// asset (MemoryStorage as "toolfleet_calls.storage=memory" does). Default
	// on disk: a NATS restart must not forget finished calls, or the retry of
	// a non-idempotent call would run it again. Share is set by the gateway
	// (StoreShare).
	Idempotency idempotency.Config
	// Results configures the store of results behind handles (results over a
	// tool's MaxResultBytes, kept for callers that allow a handle; package
	// results), its bucket fields as Idempotency's with the
	// toolfleet_results asset. Results.MaxResultBytes is the ceiling on one
	// result behind a handle; a larger result fails the call as without a
	// handle. Default [DefaultResultMaxBytes].
	Results results.Config
	// ResultHandles bounds the calls that allow a handle at once.
	ResultHandles ResultHandlesConfig
	// Events configures the call-event stream.
	Events EventsConfig
	// AnnounceSweep is how often expired workers are dropped. Default 1s.
	AnnounceSweep time.Duration
	// WarmUp is how long, after the gateway subscribes to announcements and
	// probes for workers (and after each NATS reconnect), a tool id that does
	// not resolve is UNAVAILABLE (retryable: "the gateway is starting") rather
	// than NOT_FOUND; readiness waits for the first warm-up and for the
	// announced workers' contracts to load. Only with NATSURL. Default
	// [DefaultWarmUp] (workers answer the probe at once; see registry.DefaultWarmUp).
	WarmUp time.Duration
	// ShutdownTimeout bounds the graceful stop. Default [DefaultShutdownTimeout].
	ShutdownTimeout time.Duration
	// Logger receives the gateway's logs. Default slog.Default().
	Logger *slog.Logger

	// MaxRequestBytes bounds one request body or message on every surface (gRPC,
	// Connect, gRPC-Web, OXP HTTP, MCP), checked before it is decoded.
	// Default [DefaultMaxRequestBytes].
	MaxRequestBytes int64
	// MaxInputValues bounds the JSON values (array elements, object members)
	// of one JSON request (Connect JSON, OXP HTTP, MCP), counted before it is
	// decoded. Default [DefaultMaxInputValues].
	MaxInputValues int
	// MaxBatchCalls bounds the calls of one CallTools request; a larger batch is
	// refused whole. Default [DefaultMaxBatchCalls].
	MaxBatchCalls int
	// BatchParallelism bounds how many calls of one CallTools request run at
	// once. Default [DefaultBatchParallelism].
	BatchParallelism int
	// MaxConcurrentStreams bounds the RPCs in flight on one gRPC (HTTP/2)
	// connection. Default [DefaultMaxConcurrentStreams].
	MaxConcurrentStreams uint32
	// AllowedOrigins are browser origins ("https://console.example.com") trusted
	// to make state-changing requests and to use /mcp. Default none: every
	// cross-origin browser request that changes state is refused.
	AllowedOrigins []string
	// Mounts are services served at the gateway's address (see [Mount]).
	Mounts []Mount
	// MCPTasks runs the MCP tasks of /mcp (mcp.Options.Tasks; the
	// orchestrator's, through package mcp/orchestration). Nil: /mcp serves
	// no tasks.
	MCPTasks mcp.Tasks
	// PublicURL is the gateway's origin as clients reach it
	// ("https://tools.example.com"), named in the RFC 9728 metadata and in
	// WWW-Authenticate. Default: the scheme and Host of each request.
	PublicURL string
	// Limits are the operator's rate limits and quotas per principal and per
	// tool (package ratelimit; docs/operations.md "Rate limits and quotas").
	// No rules: none. Shared across replicas through NATS when NATSURL is
	// set, else each gateway enforces them alone. Limits.Assets and
	// Limits.Standalone are set from the fields above.
	Limits ratelimit.Config
	// StoreShare is the part of each store's byte bound one principal may
	// hold (the idempotency bucket, the result handles' object store, the
	// call event stream; shares.go, docs/operations.md "Store shares"): a
	// principal over it is refused new entries, never another principal.
	// 0: [DefaultStoreShare]; [NoStoreShare]: no share. Only with NATSURL.
	StoreShare float64
	// ClientInput configures the calls whose tool asks its caller for input
	// (package clientinput).
	ClientInput ClientInputConfig
	// Tracing records the gateway's spans (server, and client towards workers)
	// with the global OpenTelemetry TracerProvider (internal/telemetry). A
	// caller's traceparent is honoured either way.
	Tracing bool
}

func (c *Config) defaults() {
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.DefaultTimeout <= 0 {
		c.DefaultTimeout = DefaultTimeout
	}
	if c.Events.StartedAfter == 0 {
		c.Events.StartedAfter = DefaultStartedEventAfter
	}
	if c.MaxResultBytes <= 0 {
		c.MaxResultBytes = DefaultMaxResultBytes
	}
	if c.Idempotency.Bucket == "" {
		c.Idempotency.Bucket = DefaultIdempotencyBucket
	}
	if c.Results.Bucket == "" {
		c.Results.Bucket = DefaultResultBucket
	}
	if c.Results.MaxResultBytes <= 0 {
		c.Results.MaxResultBytes = DefaultResultMaxBytes
	}
	if c.ResultHandles.Calls <= 0 {
		c.ResultHandles.Calls = DefaultResultHandleCalls
	}
	if c.ResultHandles.Wait <= 0 {
		c.ResultHandles.Wait = 5 * time.Second
	}
	if c.Events.Stream == "" {
		c.Events.Stream = DefaultEventStream
	}
	if c.ClientInput.TTL <= 0 {
		c.ClientInput.TTL = DefaultClientInputTTL
	}
	if c.Events.Queue <= 0 {
		c.Events.Queue = DefaultEventQueue
	}
	if c.AnnounceSweep <= 0 {
		c.AnnounceSweep = time.Second
	}
	if c.WarmUp <= 0 {
		c.WarmUp = DefaultWarmUp
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.MaxRequestBytes <= 0 {
		c.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if c.MaxInputValues <= 0 {
		c.MaxInputValues = DefaultMaxInputValues
	}
	if c.MaxBatchCalls <= 0 {
		c.MaxBatchCalls = DefaultMaxBatchCalls
	}
	if c.BatchParallelism <= 0 {
		c.BatchParallelism = DefaultBatchParallelism
	}
	if c.MaxConcurrentStreams == 0 {
		c.MaxConcurrentStreams = DefaultMaxConcurrentStreams
	}
}

// ClientInputConfig configures the request_state of calls whose tool asks
// its caller for input (MCP's multi-round-trip requests).
type ClientInputConfig struct {
	// Key seals the request_state (clientinput.KeySize bytes, the same on
	// every replica). Empty: with NATSURL the key shared in the KV bucket
	// jsassets.InputKey (the first replica creates it), else a random key per
	// process (one gateway only).
	Key []byte
	// TTL is how long a caller has to answer a tool's questions. Default
	// [DefaultClientInputTTL].
	TTL time.Duration
}

// ResultHandlesConfig bounds the calls at once that allow a handle and so
// may receive a result up to Results.MaxResultBytes, which the gateway holds
// in memory (protobuf and JSON) while it keeps it: that memory stays below
// about 3 × Calls × Results.MaxResultBytes.
type ResultHandlesConfig struct {
	// Calls bounds the calls at once; a call past the bound waits up to Wait
	// for a slot, then is refused before it runs (ResourceExhausted,
	// retryable). Default [DefaultResultHandleCalls].
	Calls int
	// Wait is how long a call waits for a slot. Default 5 s.
	Wait time.Duration
}

// EventsConfig configures the call events the gateway publishes.
type EventsConfig struct {
	// Stream names the JetStream stream of call events. Default
	// [DefaultEventStream]; its bounds are those of the TOOLFLEET_CALL_EVENTS
	// asset under Config.Assets.
	Stream string
	// Queue bounds the events held while NATS is away. Default [DefaultEventQueue].
	Queue int
	// StartedAfter is how long a call runs before its started event is
	// published; a call that ends sooner publishes only its terminal event
	// (with started_at and duration). Negative: every call publishes started
	// as it begins. Default [DefaultStartedEventAfter].
	StartedAfter time.Duration
}

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
	if cfg.Auth.Disabled && !loopback(cfg.Listen) {
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

// connectNATS connects (retrying in the background when NATS is away) and starts
// announcements, idempotency and events.
func (g *Gateway) connectNATS(ctx context.Context, bg *sync.WaitGroup) (*nats.Conn, error) {
	nc, err := g.cfg.NATS.Connect(g.cfg.NATSURL, "toolfleet-gateway",
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			g.reg.MarkNATSDown()
			if err == nil {
				return // our own Close at stop
			}
			g.log.Warn("NATS disconnected; keeping the last known registry, queueing events", "error", err)
		}),
		// Workers may have come or gone meanwhile: probe, and warm up again.
		nats.ConnectHandler(func(*nats.Conn) { g.reg.Rediscover() }), // after a failed first connect
		nats.ReconnectHandler(func(*nats.Conn) {
			g.log.Info("NATS reconnected")
			g.reg.Rediscover()
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("gateway: NATS %s: %w", g.cfg.NATSURL, err)
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("gateway: JetStream: %w", err)
	}
	if err := g.reg.WatchAnnouncements(ctx, nc, g.cfg.AnnounceSweep, g.cfg.WarmUp); err != nil {
		nc.Close()
		return nil, fmt.Errorf("gateway: subscribe to announcements: %w", err)
	}
	bg.Go(func() {
		select {
		case <-g.reg.Warm():
			g.registryWarm.Store(true)
			g.markReady()
		case <-ctx.Done():
		}
	})
	g.events = newEvents(g.log, nc, js, g.cfg.EventStreamConfig(), g.cfg.Events.Queue, g.metrics, g.shares)
	g.events.run(ctx)
	idemCfg := g.cfg.IdempotencyConfig()
	if g.shares != nil {
		idemCfg.Share = storeShare{s: g.shares, store: shareCalls}
	}
	setup := func() bool {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if g.idemPtr.Load() == nil {
			idem, err := idempotency.New(cctx, g.log, nc, js, idemCfg)
			if err != nil {
				g.setupErr.Store(&err)
				if g.fatal(err) {
					return true
				}
				g.log.Warn("idempotency store not ready; only read-only and idempotent tools run with a call_id until it is", "error", err)
				return false
			}
			g.idemPtr.Store(idem)
		}
		// Ready (for Kubernetes) once the event stream exists too; a later NATS
		// outage does not flip it back (the gateway keeps serving without NATS).
		if err := g.events.ensureStream(cctx); err != nil {
			g.setupErr.Store(&err)
			return g.fatal(err)
		}
		g.setupErr.Store(nil)
		g.assetsReady.Store(true)
		g.markReady()
		return true
	}
	if !nc.IsConnected() || !setup() {
		// The bucket needs NATS up: retry in the background until it is.
		bg.Go(func() { g.retrySetup(ctx, setup) })
	}
	// The result store is optional (only callers allowing a handle need it):
	// readiness does not wait for it.
	attempts := 0
	setupResults := func() bool {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		rs, err := results.New(cctx, js, g.cfg.ResultsConfig())
		if err != nil {
			if g.fatal(err) {
				return true
			}
			// Missing NATS permissions would repeat this every second: say it once a minute.
			if attempts++; attempts%60 == 1 {
				g.log.Warn("result store not ready; calls allowing a result handle fail over the inline limit until it is", "error", err)
			}
			return false
		}
		g.resultsPtr.Store(rs)
		return true
	}
	if !nc.IsConnected() || !setupResults() {
		bg.Go(func() { g.retrySetup(ctx, setupResults) })
	}
	if g.sealer.Load() == nil {
		keyAttempts := 0
		setupKey := func() bool {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			key, err := clientinput.SharedKey(cctx, js, g.cfg.InputKeyConfig())
			if err == nil {
				var sl *clientinput.Sealer
				if sl, err = clientinput.New(key); err == nil {
					g.sealer.Store(sl)
					return true
				}
			}
			if g.fatal(err) {
				return true
			}
			if keyAttempts++; keyAttempts%60 == 1 {
				g.log.Warn("input state key not ready; tools asking their caller for input fail until it is", "error", err)
			}
			return false
		}
		if !nc.IsConnected() || !setupKey() {
			bg.Go(func() { g.retrySetup(ctx, setupKey) })
		}
	}
	if g.limits != nil {
		// Until the bucket exists the limits follow Limits.WhenNATSDown.
		limitAttempts := 0
		setupLimits := func() bool {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			if err := g.limits.Attach(cctx, nc, js); err != nil {
				if g.fatal(err) {
					return true
				}
				if limitAttempts++; limitAttempts%60 == 1 {
					g.log.Warn("rate limit bucket not ready; limits follow --limits-when-nats-down until it is", "error", err)
				}
				return false
			}
			return true
		}
		if !nc.IsConnected() || !setupLimits() {
			bg.Go(func() { g.retrySetup(ctx, setupLimits) })
		}
	}
	if g.shares != nil {
		shareAttempts := 0
		setupShares := func() bool {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			if err := g.shares.attach(cctx, nc, js); err != nil {
				if g.fatal(err) {
					return true
				}
				if shareAttempts++; shareAttempts%60 == 1 {
					g.log.Warn("store shares' bucket not ready; each replica counts the shares alone until it is", "error", err)
				}
				return false
			}
			return true
		}
		if !nc.IsConnected() || !setupShares() {
			bg.Go(func() { g.retrySetup(ctx, setupShares) })
		}
	}
	return nc, nil
}

// markReady turns readiness (grpc.health.v1 "", GET /health) SERVING once
// the JetStream assets exist and the registry's first warm-up has ended, so
// that no traffic is routed to a gateway that would answer UNAVAILABLE for
// tools its workers serve. Nothing flips it back but shutdown.
func (g *Gateway) markReady() {
	if g.assetsReady.Load() && g.registryWarm.Load() {
		g.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	}
}

// retrySetup runs setup every second until it succeeds or ctx ends.
func (g *Gateway) retrySetup(ctx context.Context, setup func() bool) {
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

// fatal reports whether err is a configuration error that retrying cannot
// mend (a JetStream asset whose storage type the configuration changes), and
// then stops the gateway with it: Run returns err.
func (g *Gateway) fatal(err error) bool {
	if !errors.Is(err, jsassets.ErrUnsupportedChange) {
		return false
	}
	g.log.Error("a JetStream asset cannot be brought to the configuration; stopping", "error", err)
	select {
	case g.fatalErr <- fmt.Errorf("gateway: %w", err):
	default: // one is enough
	}
	return true
}

// EventStreamConfig is the call-event stream the gateway creates or updates:
// the TOOLFLEET_CALL_EVENTS asset (named Events.Stream) under Assets.
func (c Config) EventStreamConfig() jetstream.StreamConfig {
	c.defaults()
	return c.Assets.Settings(jsassets.CallEvents.Named(c.Events.Stream)).Stream(jetstream.StreamConfig{
		Name:        c.Events.Stream,
		Description: "toolfleet gateway call events",
		Subjects:    []string{EventSubjectPrefix + ">"},
		Discard:     jetstream.DiscardOld,
		Duplicates:  2 * time.Minute,
	})
}

// InputKeyConfig is the KV bucket sharing the request_state key (jsassets.InputKey).
func (c Config) InputKeyConfig() jetstream.KeyValueConfig {
	s := c.Assets.Settings(jsassets.InputKey)
	return s.KeyValue(jetstream.KeyValueConfig{Bucket: jsassets.InputKey.Name, Description: "the key sealing request_state of tool calls asking for input", History: 1})
}

// IdempotencyConfig is the idempotency store's configuration: Idempotency
// with the toolfleet_calls asset's settings under Assets
// ([jsassets.Config.Bucket]).
func (c Config) IdempotencyConfig() idempotency.Config {
	c.defaults()
	ic := c.Idempotency
	ic.BucketConfig = c.Assets.Bucket(jsassets.Idempotency, ic.BucketConfig)
	return ic
}

// ResultsConfig is the result store's configuration: Results with the
// toolfleet_results asset's settings under Assets (its own defaults applied
// by results.New).
func (c Config) ResultsConfig() results.Config {
	c.defaults()
	rc := c.Results
	rc.BucketConfig = c.Assets.Bucket(jsassets.Results, rc.BucketConfig)
	return rc
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

// idem returns the idempotency store; nil (unavailable) until NATS is configured
// and the bucket exists.
func (g *Gateway) idem() *idempotency.Store { return g.idemPtr.Load() }
