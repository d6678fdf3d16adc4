// Package runner is the orchestrator process: it connects to Temporal, NATS
// and the gateway and runs a Temporal worker for agent runs and Starlark
// programs on a task queue.
// Replicas share the work by polling the same queue; nothing else
// coordinates them. It never links the embedded servers of internal/devstack,
// so cmd/orchestrator stays a production binary; `toolfleet dev` runs the
// same Run in-process.
package runner

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/interceptor"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"google.golang.org/grpc"

	"github.com/toolfleet/toolfleet/internal/telemetry"
	"github.com/toolfleet/toolfleet/internal/tlsreload"
	"github.com/toolfleet/toolfleet/orchestrator/agent"
	"github.com/toolfleet/toolfleet/orchestrator/agentapi"
	"github.com/toolfleet/toolfleet/orchestrator/ids"
	"github.com/toolfleet/toolfleet/orchestrator/metrics"
	"github.com/toolfleet/toolfleet/orchestrator/program"
	"github.com/toolfleet/toolfleet/orchestrator/programapi"
	"github.com/toolfleet/toolfleet/orchestrator/runstore"
	"github.com/toolfleet/toolfleet/orchestrator/trigger"
	"github.com/toolfleet/toolfleet/orchestrator/visibility"
	tfclient "github.com/toolfleet/toolfleet/sdk/client"
	"github.com/toolfleet/toolfleet/sdk/jsassets"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/natsconn"
)

// Config configures the orchestrator process.
type Config struct {
	// TemporalAddress is the Temporal frontend (host:port).
	TemporalAddress string
	// Namespace is the Temporal namespace. Default "default".
	Namespace string
	// TaskQueue the worker polls. Default ids.TaskQueue.
	TaskQueue string
	// Programs configures programs: the size over which their values go to
	// the blob store by reference, and whether history may hold content
	// (set its NoContentInHistory from HistoryContent "none").
	Programs program.Config
	// NATSURL is the NATS server (transcripts, blobs, run events, token deltas).
	NATSURL string
	// NATS authenticates to NATS and says which server to trust (credentials,
	// NKey, user/password, token, TLS, mTLS); zero means none.
	NATS natsconn.Options
	// TemporalTLS turns on TLS (and mTLS) to Temporal; zero means plaintext.
	TemporalTLS TemporalTLS
	// GatewayAddress is the tool gateway (host:port, gRPC).
	GatewayAddress string
	// GatewayToken is the orchestrator's own bearer token at the gateway; it
	// needs the tools:delegate scope (and tools:approve for approved calls).
	GatewayToken string
	// GatewayTokenSource, when set, is asked for the orchestrator's bearer
	// token on every call instead of GatewayToken (e.g. a token minted and
	// renewed in-process by `toolfleet dev --gateway-jwt-secret`).
	GatewayTokenSource tfclient.TokenSource
	// KeyDir is the folder model key references "file:NAME" read from.
	KeyDir string
	// Endpoints binds model key references to the base URLs they may be
	// sent to (agent.Endpoints); nil binds nothing.
	Endpoints *agent.Endpoints
	// Models overrides the model resolver (tests, demos). Default: an
	// agent.Resolver with KeyDir.
	Models agent.Models
	// Triggers, when set, start programs and agent runs from JetStream
	// messages (orchestrator/trigger; load it with trigger.Load).
	Triggers *trigger.Config
	// MemoryStorage keeps transcripts and events in memory (tests).
	MemoryStorage bool
	// Assets sets the replicas, storage, byte bounds and retention of the
	// orchestrator's JetStream assets (run events, transcripts, run blobs,
	// trigger streams); see sdk/jsassets. Zero: R1, file, the prod profile.
	Assets jsassets.Config
	// HistoryContent is what agent runs keep of their content (model text,
	// tool results, the answer) in Temporal history: agent.HistoryContentPreviews
	// (default: the first 160 bytes of each) or agent.HistoryContentNone
	// (sha256 digests and sizes only; the answer is read from the transcript
	// store). Written into the run records bucket, so the gateway's
	// AgentService starts runs the same way. Programs follow it: with "none"
	// every program value goes to the blob store (program.Config.NoContentInHistory).
	HistoryContent string
	// PrincipalMaxBytes bounds the bytes one principal's runs hold in the
	// transcript and blob buckets: 0 takes an eighth of the two buckets'
	// byte bounds (Assets), negative means no bound.
	PrincipalMaxBytes int64
	// PrincipalMaxEventBytes bounds the bytes of run events one
	// principal's runs and programs hold in the run event stream: 0 takes
	// an eighth of the stream's byte bound (Assets), negative means no bound.
	PrincipalMaxEventBytes int64
	// PrincipalMaxRuns bounds the runs one principal holds (running, and
	// closed within the retention): 0 takes runstore.DefaultMaxRuns, negative
	// means no bound; at most runstore.MaxMaxRuns.
	PrincipalMaxRuns int
	// MaxConcurrentActivities bounds activities in flight in this process. Default 200.
	MaxConcurrentActivities int
	// StopTimeout bounds the graceful stop. Default 10s.
	StopTimeout time.Duration
	// Logger receives the process's logs. Default slog.Default().
	Logger *slog.Logger
	// Tracing records spans of workflows, activities (Temporal's
	// OpenTelemetry interceptor) and tool calls to the gateway with the global
	// TracerProvider (internal/telemetry), so a run step is one trace from the
	// workflow to the tool.
	Tracing bool
	// Metrics records the process's Prometheus metrics (package
	// orchestrator/metrics); nil makes a new set, served by
	// [Orchestrator.Metrics].
	Metrics *metrics.Metrics
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	var errs []error
	if c.TemporalAddress == "" {
		errs = append(errs, errors.New("the Temporal address is required"))
	}
	if c.NATSURL == "" {
		errs = append(errs, errors.New("the NATS URL is required"))
	}
	if c.GatewayAddress == "" {
		errs = append(errs, errors.New("the gateway address is required"))
	}
	if err := c.NATS.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Assets.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.TemporalTLS.validate(); err != nil {
		errs = append(errs, err)
	}
	if err := agent.ValidHistoryContent(c.HistoryContent); err != nil {
		errs = append(errs, fmt.Errorf("--history-content: %w", err))
	}
	if c.PrincipalMaxRuns > runstore.MaxMaxRuns {
		errs = append(errs, fmt.Errorf("--principal-max-runs %d: at most %d", c.PrincipalMaxRuns, runstore.MaxMaxRuns))
	}
	if c.Triggers != nil {
		// A trigger's key reference is checked at load, not at its first message.
		for _, t := range c.Triggers.Triggers {
			if t.Agent == nil {
				continue
			}
			prov, name, _ := strings.Cut(t.Agent.Model, ":")
			if err := c.Endpoints.Check(llm.Spec{Provider: prov, Name: name, KeyRef: t.Agent.KeyRef}); err != nil {
				errs = append(errs, fmt.Errorf("trigger %s: %w", t.Name, err))
			}
		}
	}
	return errors.Join(errs...)
}

// TemporalTLS is how the orchestrator connects to Temporal over TLS.
type TemporalTLS struct {
	// CAFile is a PEM file of the CAs to trust for Temporal's certificate;
	// empty trusts the system's roots. Setting any field turns TLS on.
	CAFile string
	// CertFile and KeyFile are the client certificate and key for mTLS; both
	// or neither. They are read again on every handshake, so a rotated
	// certificate (a renewed Kubernetes secret) needs no restart.
	CertFile, KeyFile string
	// ServerName overrides the name checked in Temporal's certificate
	// (default: the host of the Temporal address).
	ServerName string
}

// Enabled reports whether any TLS setting is made.
func (t TemporalTLS) Enabled() bool {
	return t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" || t.ServerName != ""
}

func (t TemporalTLS) validate() error {
	if (t.CertFile == "") != (t.KeyFile == "") {
		return errors.New("temporal TLS: the client certificate and key go together (set both or neither)")
	}
	for _, f := range []string{t.CAFile, t.CertFile, t.KeyFile} {
		if f == "" {
			continue
		}
		if _, err := os.Stat(f); err != nil {
			return fmt.Errorf("temporal TLS: %w", err)
		}
	}
	return nil
}

// config builds the client TLS configuration (nil when TLS is off).
func (t TemporalTLS) config() (*tls.Config, error) {
	if !t.Enabled() {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if t.CAFile != "" {
		pool, err := tlsreload.CertPool(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("temporal TLS CA: %w", err)
		}
		cfg.RootCAs = pool
	}
	if t.CertFile != "" {
		// Loaded now so a bad pair fails Start, and again when the files
		// change so a rotated pair is picked up.
		kp, err := tlsreload.Load(t.CertFile, t.KeyFile, tlsreload.DefaultCheckEvery)
		if err != nil {
			return nil, fmt.Errorf("temporal TLS client certificate: %w", err)
		}
		cfg.GetClientCertificate = kp.GetClientCertificate
	}
	return cfg, nil
}

func (c *Config) defaults() {
	if c.Namespace == "" {
		c.Namespace = "default"
	}
	if c.TaskQueue == "" {
		c.TaskQueue = ids.TaskQueue
	}
	if c.MaxConcurrentActivities <= 0 {
		c.MaxConcurrentActivities = 200
	}
	if c.StopTimeout <= 0 {
		c.StopTimeout = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Models == nil {
		r := agent.NewResolver()
		r.KeyDir = c.KeyDir
		r.Endpoints = c.Endpoints
		c.Models = r
	}
}

// quota is the per-principal quota: the configured bounds, or their
// defaults (an eighth of the transcript and blob buckets' byte bounds, and
// runstore.DefaultMaxRuns runs).
func (c *Config) quota(assets jsassets.Config) runstore.Quota {
	q := runstore.Quota{MaxBytes: c.PrincipalMaxBytes, MaxRuns: c.PrincipalMaxRuns}
	switch {
	case q.MaxBytes == 0:
		q.MaxBytes = (assets.Settings(jsassets.Transcripts).MaxBytes + assets.Settings(jsassets.RunBlobs).MaxBytes) / runstore.DefaultQuotaShare
	case q.MaxBytes < 0:
		q.MaxBytes = 0
	}
	q.MaxEventBytes = c.PrincipalMaxEventBytes
	switch {
	case q.MaxEventBytes == 0:
		q.MaxEventBytes = agent.EventStreamFor("", assets).MaxBytes / runstore.DefaultQuotaShare
	case q.MaxEventBytes < 0:
		q.MaxEventBytes = 0
	}
	switch {
	case q.MaxRuns == 0:
		q.MaxRuns = runstore.DefaultMaxRuns
	case q.MaxRuns < 0:
		q.MaxRuns = 0
	}
	return q
}

// waitNamespace polls DescribeNamespace until it succeeds or ctx ends.
func waitNamespace(ctx context.Context, c client.Client, namespace string, log *slog.Logger) error {
	const maxDelay = 5 * time.Second
	delay := 200 * time.Millisecond
	for {
		_, err := c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: namespace})
		if err == nil {
			return nil
		}
		log.Info("waiting for the Temporal namespace", "namespace", namespace, "error", err)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("the Temporal namespace %q: %w (last: %w)", namespace, ctx.Err(), err)
		case <-t.C:
		}
		delay = min(2*delay, maxDelay)
	}
}

// Orchestrator is a running orchestrator process.
type Orchestrator struct {
	cfg      Config
	nc       *nats.Conn
	js       jetstream.JetStream
	temporal client.Client
	gateway  *tfclient.Client
	worker   worker.Worker
	triggers *trigger.Runner
	metrics  *metrics.Metrics
	// Runs starts and steers runs through this process's connections.
	Runs *agent.Runs
	// Programs starts and steers Starlark programs the same way.
	Programs *program.Programs
	// failed receives the worker's fatal error (see Failed).
	failed chan error
	// stopReaper stops freeing closed runs' data.
	stopReaper func()
}

// Failed is watched by the process that runs the orchestrator: it
// receives the error that stopped the Temporal worker for good (the SDK
// gives up on some errors, e.g. "namespace not found" after the namespace
// was described). The process must then exit, so that it is restarted,
// rather than stay up and look healthy while nothing polls.
func (o *Orchestrator) Failed() <-chan error { return o.failed }

// Start connects everything and starts polling; Stop undoes it.
func Start(ctx context.Context, cfg Config) (_ *Orchestrator, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.defaults()
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.New()
	}
	o := &Orchestrator{cfg: cfg, metrics: cfg.Metrics}
	defer func() {
		if err != nil {
			o.Stop()
		}
	}()
	if o.nc, err = cfg.NATS.Connect(cfg.NATSURL, "toolfleet-orchestrator", nats.MaxReconnects(-1)); err != nil {
		return nil, fmt.Errorf("connect to NATS: %w", err)
	}
	js, err := jetstream.New(o.nc)
	if err != nil {
		return nil, fmt.Errorf("JetStream: %w", err)
	}
	o.js = js
	assets := cfg.Assets
	if cfg.MemoryStorage {
		assets = assets.WithStorage(jsassets.StorageMemory)
		assets.Profile = cmp.Or(assets.Profile, jsassets.ProfileDev) // tests: small
	}
	store, err := runstore.OpenStore(ctx, js, runstore.StoreConfig{Memory: cfg.MemoryStorage, Assets: assets,
		Settings: &runstore.Settings{Quota: cfg.quota(assets), HistoryContent: cmp.Or(cfg.HistoryContent, agent.HistoryContentPreviews)}})
	if err != nil {
		return nil, err
	}
	events, err := agent.OpenEvents(ctx, o.nc, js, agent.EventStreamFor("", assets))
	if err != nil {
		return nil, err
	}
	events.CountAgainst(store) // each principal's events within Quota.MaxEventBytes
	opts := []tfclient.Option{tfclient.WithRetry(tfclient.RetryPolicy{MaxAttempts: 1})}
	var interceptors []interceptor.ClientInterceptor
	if cfg.Tracing {
		opts = append(opts, tfclient.WithDialOptions(grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithPropagators(telemetry.Propagator)))))
		ti, err := opentelemetry.NewTracingInterceptor(opentelemetry.TracerOptions{TextMapPropagator: telemetry.Propagator})
		if err != nil {
			return nil, fmt.Errorf("tracing interceptor: %w", err)
		}
		interceptors = append(interceptors, ti)
	}
	switch {
	case cfg.GatewayTokenSource != nil:
		opts = append(opts, tfclient.WithTokenSource(cfg.GatewayTokenSource))
	case cfg.GatewayToken != "":
		opts = append(opts, tfclient.WithToken(cfg.GatewayToken))
	}
	if o.gateway, err = tfclient.New(cfg.GatewayAddress, opts...); err != nil {
		return nil, err
	}
	tlsCfg, err := cfg.TemporalTLS.config()
	if err != nil {
		return nil, err
	}
	if o.temporal, err = client.DialContext(ctx, client.Options{HostPort: cfg.TemporalAddress, Namespace: cfg.Namespace,
		Logger: tlog.NewStructuredLogger(cfg.Logger), ConnectionOptions: client.ConnectionOptions{TLS: tlsCfg},
		Interceptors: interceptors,
		// Program values over Programs.InlineBytes are kept in the blob
		// store, not in history (program.ExternalStorage).
		ExternalStorage: program.ExternalStorage(store, cfg.programs())}); err != nil {
		return nil, fmt.Errorf("connect to Temporal at %s: %w", cfg.TemporalAddress, err)
	}
	// A worker on a namespace that does not exist yet would only log
	// errors; wait for it (a fresh cluster creates it after starting).
	if err := waitNamespace(ctx, o.temporal, cfg.Namespace, cfg.Logger); err != nil {
		return nil, err
	}
	// Operators find runs and programs by these; without them (no operator
	// rights on this namespace) everything runs, only unsearchable.
	if err := visibility.Ensure(ctx, o.temporal, cfg.Namespace); err != nil {
		cfg.Logger.Warn("runs and programs will not carry search attributes", "error", err)
	}
	o.failed = make(chan error, 1)
	// The memory budgets of the programs this process runs at once add up
	// to at most the script memory (issue 32; docs/operations.md).
	program.SetAdmission(cfg.programs().Admission())
	o.worker = worker.New(o.temporal, cfg.TaskQueue, worker.Options{
		OnFatalError: func(err error) {
			select {
			case o.failed <- err:
			default:
			}
		},
		MaxConcurrentActivityExecutionSize: cfg.MaxConcurrentActivities,
		WorkerStopTimeout:                  cfg.StopTimeout,
		DeadlockDetectionTimeout:           program.DeadlockDetectionTimeout, // scripts compute between yields
	})
	// Code mode runs programs as child workflows on this worker.
	agent.Register(o.worker, &agent.Activities{Store: store, Events: events, Gateway: o.gateway, Models: cfg.Models,
		Metrics: o.metrics})
	program.Register(o.worker, &program.Activities{Gateway: o.gateway, Events: events, Metrics: o.metrics, Quota: store})
	if err := o.worker.Start(); err != nil {
		return nil, fmt.Errorf("start the Temporal worker: %w", err)
	}
	// Closed runs' data is freed after the retention (the records bucket's max age).
	reaper := &runstore.Reaper{Store: store, Temporal: o.temporal, Log: cfg.Logger}
	if o.stopReaper, err = reaper.Start(ctx); err != nil {
		return nil, err
	}
	seen := &visibility.Checker{Client: o.temporal, Namespace: cfg.Namespace}
	o.Runs = &agent.Runs{Temporal: o.temporal, Store: store, TaskQueue: cfg.TaskQueue, Visibility: seen,
		HistoryContent: cmp.Or(cfg.HistoryContent, agent.HistoryContentPreviews)}
	o.Programs = &program.Programs{Temporal: o.temporal, TaskQueue: cfg.TaskQueue, Visibility: seen, Config: cfg.programs(),
		Quota: store} // program values count against their owner's byte quota
	if cfg.Triggers != nil {
		if o.triggers, err = trigger.Start(ctx, js, cfg.Triggers, trigger.Options{Programs: o.Programs, Runs: o.Runs,
			MemoryStorage: cfg.MemoryStorage, Assets: assets, Logger: cfg.Logger}); err != nil {
			return nil, err
		}
	}
	return o, nil
}

// AgentService returns the AgentService over this process's connections,
// authenticating callers with auth; mount its Handler at the gateway.
func (o *Orchestrator) AgentService(auth agentapi.Authenticator) *agentapi.Service {
	// The runs' model turns run in this process: it can tell whether their keys are set.
	models, _ := o.cfg.Models.(agent.ModelChecker)
	return &agentapi.Service{Runs: o.Runs, JS: o.js, NC: o.nc, Auth: auth, Log: o.cfg.Logger, Endpoints: o.cfg.Endpoints, CheckEndpoints: true,
		Models: models}
}

// ProgramService returns the ProgramService over this process's
// connections, authenticating callers with auth; mount it at the gateway.
func (o *Orchestrator) ProgramService(auth agentapi.Authenticator) *programapi.Service {
	return &programapi.Service{Programs: o.Programs, Events: o.js, Auth: auth, Triggers: o.cfg.Triggers.Proto}
}

// Metrics serves this process's Prometheus metrics (docs/operations.md):
// agent runs, model turns and tokens, tool calls, programs and their limits,
// and the Go runtime's.
func (o *Orchestrator) Metrics() http.Handler { return o.metrics.Handler() }

// Registry is the registry of Metrics, to gather from or add to.
func (o *Orchestrator) Registry() *prometheus.Registry { return o.metrics.Registry() }

// Stop stops polling, lets in-flight activities finish within the stop
// timeout, then closes the connections.
func (o *Orchestrator) Stop() {
	if o.triggers != nil {
		o.triggers.Stop()
	}
	if o.stopReaper != nil {
		o.stopReaper()
	}
	if o.worker != nil {
		o.worker.Stop()
	}
	if o.temporal != nil {
		o.temporal.Close()
	}
	if o.gateway != nil {
		_ = o.gateway.Close()
	}
	if o.nc != nil {
		o.nc.Close()
	}
}

// programs is the programs' configuration with the operator's history setting
// applied: "none" keeps every program value out of history too.
func (c Config) programs() program.Config {
	p := c.Programs
	if c.HistoryContent == agent.HistoryContentNone {
		p.NoContentInHistory = true
	}
	return p
}
