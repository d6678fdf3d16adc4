package tool

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"buf.build/go/protovalidate"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	rpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	rpbalpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/toolfleet/toolfleet/sdk/jsassets"
	"github.com/toolfleet/toolfleet/sdk/natsconn"
	"github.com/toolfleet/toolfleet/sdk/tool/contract"
)

// Defaults of [Config].
const (
	DefaultListen           = "127.0.0.1:0"
	DefaultAnnounceInterval = 5 * time.Second
	DefaultShutdownTimeout  = 10 * time.Second
)

// drainLinger is how long at most a draining worker that announces keeps
// refusing calls (with [DrainingTrailer]) after its DRAINING announcement
// before it closes its port, so that the gateway has stopped sending; it is
// shorter with a shorter AnnounceInterval or ShutdownTimeout.
const drainLinger = time.Second

// Errors returned by [Worker] methods; match them with errors.Is.
var (
	// ErrAlreadyRunning is returned by a second call of Run.
	ErrAlreadyRunning = errors.New("tool: worker already running")
	// ErrNoServices is returned by Run when no service was registered.
	ErrNoServices = errors.New("tool: no service registered")
	// ErrUnknownService is returned when a registered service has no descriptor
	// linked into the binary (reflection and validation need it).
	ErrUnknownService = errors.New("tool: service descriptor not linked")
	// ErrNoNATS is returned by ConnectNATS when the worker has no NATS URL.
	ErrNoNATS = errors.New("tool: no NATS URL configured")
)

// MetricsHook observes every finished call. err is nil on success; an execution
// error satisfies [AsToolError]. It runs on the call's goroutine, so keep it cheap.
type MetricsHook func(ctx context.Context, info CallInfo, d time.Duration, err error)

// CallInfo describes one call to a tool.
type CallInfo struct {
	// FullMethod is the gRPC method, e.g. "/tools.calculator.v1.CalculatorService/Add".
	FullMethod string
	// CallID is the caller's call id ("" when the caller sent none).
	CallID string
	// TraceParent is the W3C traceparent the caller sent ("" when none).
	TraceParent string
}

// Config configures a [Worker]. The zero value serves on 127.0.0.1 on a free port
// without announcements.
type Config struct {
	// Name names the worker in logs and in its default id, e.g. "calculator".
	Name string
	// Listen is the host:port to serve on. Default [DefaultListen].
	Listen string
	// NATSURL enables announcements on toolfleet.registry.announce. Empty = none.
	NATSURL string
	// NATS holds the credentials and TLS settings for NATSURL (none by default).
	NATS natsconn.Options
	// Assets sizes the JetStream assets the worker's services create
	// (--js-replicas, --js-storage, --js-profile, --js-overrides; package
	// sdk/jsassets). The worker itself creates none.
	Assets jsassets.Config
	// AdvertiseAddr is the address announced to the registry. Default: the
	// listener's address (set it when listening on 0.0.0.0 or behind NAT).
	AdvertiseAddr string
	// WorkerID is the stable id of this process in announcements. Default: the name,
	// the host name and a random suffix.
	WorkerID string
	// Logger receives the worker's logs. Default slog.Default().
	Logger *slog.Logger
	// AnnounceInterval is the heartbeat period; the announced ttl is 3x. Default
	// [DefaultAnnounceInterval].
	AnnounceInterval time.Duration
	// ShutdownTimeout bounds the graceful stop; in-flight calls are then cut.
	// Default [DefaultShutdownTimeout].
	ShutdownTimeout time.Duration
	// Metrics observes every call when set.
	Metrics MetricsHook
	// Descriptors resolves the files of registered services for reflection and
	// toolkit discovery. Default protoregistry.GlobalFiles (the generated packages
	// linked into the binary); set it to serve services built at run time.
	Descriptors protodesc.Resolver
	// TLS serves gRPC over TLS or mTLS (plain text by default).
	TLS TLSConfig
	// HealthListen, when set, is a host:port that serves only grpc.health.v1 in
	// plain text, for probes that cannot speak TLS (Kubernetes' native gRPC
	// probes) when TLS is on. It reports the same status as the main port.
	HealthListen string
	// ServerOptions are appended to the grpc.Server options (e.g. credentials).
	// Interceptors given here run inside the worker's own.
	ServerOptions []grpc.ServerOption
}

func (c Config) withDefaults() Config {
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.AnnounceInterval <= 0 {
		c.AnnounceInterval = DefaultAnnounceInterval
	}
	if c.Descriptors == nil {
		c.Descriptors = protoregistry.GlobalFiles
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	if c.WorkerID == "" {
		host, _ := os.Hostname()
		var b [4]byte
		_, _ = rand.Read(b[:])
		c.WorkerID = fmt.Sprintf("%s-%s-%s", nonEmpty(c.Name, "worker"), nonEmpty(host, "host"), hex.EncodeToString(b[:]))
	}
	return c
}

// Worker serves gRPC services as a toolkit worker. Create it with [NewWorker],
// register services (it is a grpc.ServiceRegistrar), then call Run.
type Worker struct {
	cfg    Config
	log    *slog.Logger
	server *grpc.Server
	health *health.Server

	policies  *policies
	gate      *drainGate
	journaler *journaler

	mu       sync.Mutex
	toolkits []contract.Toolkit
	services int
	running  bool
	addr     string
	// healthAddr is the plain-text health port's address (Config.HealthListen).
	healthAddr string
	ready      chan struct{}
	onStop     []func()
}

var _ grpc.ServiceRegistrar = (*Worker)(nil)

// NewWorker returns a worker configured by cfg. It fails when protovalidate cannot
// be set up.
func NewWorker(cfg Config) (*Worker, error) {
	cfg = cfg.withDefaults()
	if cfg.NATSURL != "" {
		// Reads the credential and certificate files: fail now, not at each reconnect.
		if _, err := cfg.NATS.NATSOptions(); err != nil {
			return nil, fmt.Errorf("tool: %w", err)
		}
	}
	if err := cfg.Assets.Validate(); err != nil {
		return nil, fmt.Errorf("tool: %w", err)
	}
	validator, err := protovalidate.New()
	if err != nil {
		return nil, fmt.Errorf("tool: create validator: %w", err)
	}
	w := &Worker{
		cfg:      cfg,
		log:      cfg.Logger.With("worker_id", cfg.WorkerID),
		health:   health.NewServer(),
		ready:    make(chan struct{}),
		policies: &policies{byMethod: map[string]policy{}},
		gate:     &drainGate{},
	}
	w.journaler = newJournaler(w.log, cfg.WorkerID)
	opts := []grpc.ServerOption{
		// OpenTelemetry: W3C trace context from the caller becomes the parent of the
		// call's span (recorded by the global TracerProvider, a no-op unless the
		// process configures one), so tools that call on propagate the trace.
		grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithPropagators(
			propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})))),
		grpc.ChainUnaryInterceptor(
			w.gate.interceptor(),
			inputInterceptor(),
			observeInterceptor(w.log, cfg.Metrics),
			recoverInterceptor(w.log),
			callerLogInterceptor(w.log),
			validateInterceptor(validator),
			// The call journal: after validation, around the tool and the
			// policy (its timeout, its result bound) whose outcome it records.
			w.journaler.interceptor(),
			w.policies.interceptor(),
		),
		grpc.ChainStreamInterceptor(recoverStreamInterceptor(w.log)),
	}
	if cfg.TLS.On() {
		creds, err := cfg.TLS.serverOption()
		if err != nil {
			return nil, err
		}
		opts = append(opts, creds)
	}
	w.server = grpc.NewServer(append(opts, cfg.ServerOptions...)...)
	healthpb.RegisterHealthServer(w.server, w.health)
	ropts := reflection.ServerOptions{Services: w.server, DescriptorResolver: cfg.Descriptors, ExtensionResolver: protoregistry.GlobalTypes}
	rpb.RegisterServerReflectionServer(w.server, reflection.NewServerV1(ropts))
	rpbalpha.RegisterServerReflectionServer(w.server, reflection.NewServer(ropts)) // older clients
	return w, nil
}

// RegisterService registers a service implementation, typically through a
// generated RegisterXServer function. It must be called before Run. The service's
// descriptor must be resolvable through Config.Descriptors (by default: linked into
// the binary, which importing the generated package does); otherwise the worker
// logs an error, serves it without its contract's policy and does not announce it.
func (w *Worker) RegisterService(desc *grpc.ServiceDesc, impl any) {
	w.server.RegisterService(desc, impl)
	w.mu.Lock()
	w.services++
	w.mu.Unlock()
	d, err := w.cfg.Descriptors.FindDescriptorByName(protoreflect.FullName(desc.ServiceName))
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if err != nil || !ok {
		w.log.Error("service descriptor not found; it is served but not announced",
			"service", desc.ServiceName, "error", fmt.Errorf("%w: %s", ErrUnknownService, desc.ServiceName))
		return
	}
	w.mu.Lock()
	w.toolkits = append(w.toolkits, contract.ToolkitOf(sd))
	w.mu.Unlock()
	w.policies.add(sd)
}

// Toolkits returns the toolkits registered so far.
func (w *Worker) Toolkits() []contract.Toolkit {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]contract.Toolkit(nil), w.toolkits...)
}

// Logger returns the worker's logger, for services to log with the same attributes.
func (w *Worker) Logger() *slog.Logger { return w.log }

// NATSURL is the NATS URL the worker was configured with ("" when none). Services
// that keep their state in NATS connect with [Worker.ConnectNATS], so a binary
// needs one set of --nats flags.
func (w *Worker) NATSURL() string { return w.cfg.NATSURL }

// Assets is the worker's JetStream asset configuration: a service that keeps
// state in JetStream creates its stream or bucket with the settings it gives
// ([jsassets.Config.Settings], [jsassets.EnsureKeyValue]).
func (w *Worker) Assets() jsassets.Config { return w.cfg.Assets }

// ConnectNATS connects to the worker's NATS with its credentials and TLS
// settings, naming the connection name; extra options follow (reconnect policy,
// timeouts). It fails when the worker has no NATS URL.
func (w *Worker) ConnectNATS(name string, extra ...nats.Option) (*nats.Conn, error) {
	if w.cfg.NATSURL == "" {
		return nil, ErrNoNATS
	}
	return w.cfg.NATS.Connect(w.cfg.NATSURL, name, extra...)
}

// OnStop registers f to run when Run returns, after the server stopped serving, so
// that a service can close what it holds (connections, pools). Hooks run in reverse
// order of registration.
func (w *Worker) OnStop(f func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.onStop = append(w.onStop, f)
}

func (w *Worker) runStopHooks() {
	w.mu.Lock()
	hooks := w.onStop
	w.onStop = nil
	w.mu.Unlock()
	for i := len(hooks) - 1; i >= 0; i-- {
		hooks[i]()
	}
}

// Ready is closed once Run listens; Addr is valid from then on.
func (w *Worker) Ready() <-chan struct{} { return w.ready }

// HealthAddr returns the address of the plain-text health port, or "" when
// there is none or before Run listens.
func (w *Worker) HealthAddr() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.healthAddr
}

// Addr returns the address the worker listens on, or "" before Run listens.
func (w *Worker) Addr() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.addr
}

// Run serves until ctx is done, then leaves politely within ShutdownTimeout:
// health turns NOT_SERVING, a DRAINING announcement goes out (the gateway stops
// sending calls, and keeps the tools known while the worker leaves), new calls are
// refused with a retryable UNAVAILABLE carrying [DrainingTrailer] (the gateway
// moves them to another replica), the calls in flight finish (or are cut at the
// bound), a NOT_SERVING announcement goes out, then the OnStop hooks run. It
// returns nil after a stop caused by ctx and an error when listening or serving
// fails.
func (w *Worker) Run(ctx context.Context) error {
	w.mu.Lock()
	if w.running {
		w.mu.Unlock()
		return ErrAlreadyRunning
	}
	w.running = true
	toolkits := append([]contract.Toolkit(nil), w.toolkits...)
	services := w.services
	w.mu.Unlock()
	if services == 0 {
		return ErrNoServices
	}
	defer w.runStopHooks()

	lis, err := (&net.ListenConfig{}).Listen(ctx, "tcp", w.cfg.Listen)
	if err != nil {
		return fmt.Errorf("tool: listen on %s: %w", w.cfg.Listen, err)
	}
	addr := lis.Addr().String()
	w.mu.Lock()
	w.addr = addr
	w.mu.Unlock()
	for name := range w.server.GetServiceInfo() {
		w.health.SetServingStatus(name, healthpb.HealthCheckResponse_SERVING)
	}
	w.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)

	var ann *announcer
	var nc *nats.Conn
	if w.cfg.NATSURL != "" {
		ann = newAnnouncer(w.cfg, w.log, nonEmpty(w.cfg.AdvertiseAddr, addr), toolkits)
		ann.start()
		nc = ann.nc // nil when it could not connect: no journal, no announcements
	}
	// The call journal writes on the announcer's connection.
	w.journaler.start(nc, toolkits)

	var healthSrv *grpc.Server
	if w.cfg.HealthListen != "" {
		hl, err := (&net.ListenConfig{}).Listen(ctx, "tcp", w.cfg.HealthListen)
		if err != nil {
			_ = lis.Close()
			return fmt.Errorf("tool: listen for health on %s: %w", w.cfg.HealthListen, err)
		}
		w.mu.Lock()
		w.healthAddr = hl.Addr().String()
		w.mu.Unlock()
		healthSrv = grpc.NewServer()
		healthpb.RegisterHealthServer(healthSrv, w.health)
		go func() { _ = healthSrv.Serve(hl) }()
		defer healthSrv.Stop() // last: probes see NOT_SERVING while calls drain
	}

	serveErr := make(chan error, 1)
	go func() { serveErr <- w.server.Serve(lis) }()
	close(w.ready)
	w.log.Info("worker serving", "addr", addr, "toolkits", toolkitNames(toolkits), "nats", w.cfg.NATSURL != "")

	select {
	case err := <-serveErr:
		if ann != nil {
			ann.stop()
		}
		return fmt.Errorf("tool: serve: %w", err)
	case <-ctx.Done():
	}

	w.log.Info("worker draining", "timeout", w.cfg.ShutdownTimeout.String())
	// One bound for the whole leave: the linger, the calls in flight, the stop.
	bound, cancel := context.WithTimeout(context.Background(), w.cfg.ShutdownTimeout)
	defer cancel()
	w.health.Shutdown()
	idle := w.gate.close()
	if ann != nil {
		ann.drain()
		// Linger a moment, refusing, so that the gateway has seen DRAINING before
		// the port closes.
		linger := time.NewTimer(min(drainLinger, w.cfg.AnnounceInterval))
		select {
		case <-linger.C:
		case <-bound.Done():
		}
		linger.Stop()
	}
	select {
	case <-idle:
	case <-bound.Done():
		w.log.Warn("tool calls still running at the drain's bound; cutting them")
		w.journaler.cut() // claimed calls do not end with their caller's stream
	}
	if ann != nil {
		ann.stop() // sends NOT_SERVING, bounded
	}
	stopped := make(chan struct{})
	go func() {
		w.server.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-bound.Done():
		w.log.Warn("graceful stop timed out; cutting in-flight calls")
		w.server.Stop()
		<-stopped
	}
	<-serveErr // Serve returns nil after (Graceful)Stop
	w.log.Info("worker stopped")
	return nil
}

func toolkitNames(tks []contract.Toolkit) []string {
	out := make([]string, 0, len(tks))
	for _, t := range tks {
		out = append(out, t.Name+"@"+t.Version)
	}
	return out
}

func nonEmpty(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
