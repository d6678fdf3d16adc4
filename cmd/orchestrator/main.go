// Command orchestrator runs durable agent runs: a Temporal worker on a task
// queue that calls models and, through the gateway, tools. Run as many
// replicas as needed; they share the task queue. It does not link the
// embedded NATS or Temporal servers (those are `toolfleet dev`'s).
//
//	orchestrator --temporal-address temporal:7233 --nats-url nats://nats:4222 \
//	    --gateway-address gateway:8080
//
// Every flag can be set from the environment as TOOLFLEET_<FLAG>, e.g.
// TOOLFLEET_GATEWAY_TOKEN. Model keys are read at call time from
// OPENAI_API_KEY, ANTHROPIC_API_KEY, GEMINI_API_KEY, TOOLFLEET_MODEL_KEY_* or
// files in --model-key-dir, as each run's key reference says. The scripted
// demo model ("scripted:demo") needs no key; --script-dir serves scripted
// models from files (scripted:NAME.yaml), as `toolfleet dev --script-dir` does.
//
// It serves grpc.health.v1 in plaintext on --listen (default
// 127.0.0.1:8081; 0.0.0.0:8081 in Kubernetes): the overall service ("")
// reports NOT_SERVING until the Temporal namespace has been described and the
// worker polls, then SERVING, and NOT_SERVING again while it stops. Its
// Prometheus metrics (docs/operations.md) are at GET /metrics on
// --metrics-listen (default 127.0.0.1:9090; empty turns them off).
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/toolfleet/toolfleet/internal/config"
	"github.com/toolfleet/toolfleet/internal/telemetry"
	"github.com/toolfleet/toolfleet/orchestrator/agent"
	"github.com/toolfleet/toolfleet/orchestrator/metrics"
	"github.com/toolfleet/toolfleet/orchestrator/runner"
	"github.com/toolfleet/toolfleet/orchestrator/runstore"
	"github.com/toolfleet/toolfleet/orchestrator/trigger"
	"github.com/toolfleet/toolfleet/sdk/jsassets"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "orchestrator:", err)
		os.Exit(1)
	}
}

// options are the process's settings beyond runner.Config.
type options struct {
	listen        string
	metricsListen string
	logLevel      string
	triggers      string
	// modelEndpoints are the --model-endpoint bindings (agent.ParseEndpoints).
	modelEndpoints []string
	startTimeout   time.Duration
	// principalMaxBytes is --principal-max-bytes (a size, "" or "none").
	principalMaxBytes string
	// principalMaxEventBytes is --principal-max-event-bytes (a size, "" or "none").
	principalMaxEventBytes string
	scriptMemory           string
	// scriptDir is --script-dir: where scripted:NAME.yaml model scripts are
	// read from ("" refuses them), as in `toolfleet dev`.
	scriptDir string
}

// parse reads the flags (and TOOLFLEET_* environment) into a validated
// configuration.
func parse(args []string) (runner.Config, options, error) {
	var cfg runner.Config
	var opt options
	fs := pflag.NewFlagSet("orchestrator", pflag.ContinueOnError)
	fs.StringVar(&opt.listen, "listen", "127.0.0.1:8081", "host:port of the plaintext gRPC health server (grpc.health.v1)")
	fs.StringVar(&opt.metricsListen, "metrics-listen", "127.0.0.1:9090", "host:port of the Prometheus metrics (GET /metrics); empty: none")
	fs.StringVar(&cfg.TemporalAddress, "temporal-address", "127.0.0.1:7233", "Temporal frontend host:port")
	fs.StringVar(&cfg.Namespace, "namespace", "default", "Temporal namespace")
	fs.StringVar(&cfg.TemporalTLS.CAFile, "temporal-tls-ca-file", "", "PEM CAs to trust for Temporal; any --temporal-tls-* flag turns TLS on")
	fs.StringVar(&cfg.TemporalTLS.CertFile, "temporal-tls-cert-file", "", "client certificate for Temporal mTLS (re-read on every handshake)")
	fs.StringVar(&cfg.TemporalTLS.KeyFile, "temporal-tls-key-file", "", "client key for Temporal mTLS")
	fs.StringVar(&cfg.TemporalTLS.ServerName, "temporal-tls-server-name", "", "name expected in Temporal's certificate (default: the address's host)")
	fs.StringVar(&cfg.TaskQueue, "task-queue", "toolfleet-agent", "Temporal task queue of agent runs")
	fs.StringVar(&cfg.NATSURL, "nats-url", "nats://127.0.0.1:4222", "NATS server URL")
	cfg.NATS.AddFlags(fs)
	cfg.Assets.AddFlags(fs)
	fs.StringVar(&cfg.GatewayAddress, "gateway-address", "127.0.0.1:8080", "tool gateway host:port (gRPC)")
	fs.StringVar(&cfg.GatewayToken, "gateway-token", "", "bearer token of the orchestrator at the gateway (scopes tools:delegate, tools:approve)")
	fs.StringVar(&opt.scriptDir, "script-dir", "", "folder that scripted:NAME.yaml model scripts are read from, as with toolfleet dev --script-dir (docs/agents.md); empty: script files refused (scripted:demo always works)")
	fs.StringVar(&cfg.KeyDir, "model-key-dir", "", "folder that model key references file:NAME read from (empty: file references refused)")
	fs.StringArrayVar(&opt.modelEndpoints, "model-endpoint", nil, "KEYREF=URL[,URL...] (several separated by ;): the base URLs a model key may be sent to; KEYREF env:NAME, file:NAME or none, URL default (the provider's own) or http(s)://host[:port|:*][/path] (docs/agents.md)")
	fs.StringVar(&cfg.HistoryContent, "history-content", agent.HistoryContentPreviews, "what agent runs keep of their content in Temporal history: previews (160 bytes of each model reply and tool result, and of the answer) or none (sha256 digests and sizes only)")
	fs.StringVar(&opt.principalMaxEventBytes, "principal-max-event-bytes", "", "bytes of run events one principal's runs and programs may hold in the run event stream, e.g. 128MiB; empty: an eighth of the stream's byte bound; none: no bound")
	fs.StringVar(&opt.principalMaxBytes, "principal-max-bytes", "", "bytes one principal's runs may hold in transcripts and blobs, e.g. 2GiB; empty: an eighth of the two buckets' byte bounds; none: no bound")
	fs.StringVar(&opt.scriptMemory, "script-memory", "", "the most the memory budgets (max_memory_bytes) of the programs this process runs at once add up to, e.g. 4GiB; a program waits for room, one whose budget is over it is refused; empty: three quarters of GOMEMLIMIT, else 4GiB; none: no ceiling (docs/operations.md)")
	fs.IntVar(&cfg.PrincipalMaxRuns, "principal-max-runs", runstore.DefaultMaxRuns, "runs one principal may hold (running, or closed and not yet freed); 0: no bound")
	fs.IntVar(&cfg.MaxConcurrentActivities, "max-concurrent-activities", 200, "activities in flight in this process at most")
	fs.DurationVar(&cfg.StopTimeout, "stop-timeout", 10*time.Second, "how long in-flight activities may finish on SIGTERM")
	fs.DurationVar(&opt.startTimeout, "start-timeout", 5*time.Minute, "how long to wait at start for NATS, Temporal and its namespace")
	fs.StringVar(&opt.triggers, "triggers", "", "trigger file: JetStream subjects that start programs and agent runs (docs/programs.md)")
	fs.StringVar(&opt.logLevel, "log-level", "info", "least level of logs: debug, info, warn, error")
	config.BindEnv(fs, "TOOLFLEET")
	if err := fs.Parse(args); err != nil {
		return cfg, opt, err
	}
	if err := config.ApplyEnv(fs, "TOOLFLEET"); err != nil {
		return cfg, opt, err
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(opt.logLevel)); err != nil {
		return cfg, opt, fmt.Errorf("--log-level %q: want debug, info, warn or error", opt.logLevel)
	}
	if _, _, err := net.SplitHostPort(opt.listen); err != nil {
		return cfg, opt, fmt.Errorf("--listen %q: want host:port", opt.listen)
	}
	if _, _, err := net.SplitHostPort(opt.metricsListen); opt.metricsListen != "" && err != nil {
		return cfg, opt, fmt.Errorf("--metrics-listen %q: want host:port, or empty for none", opt.metricsListen)
	}
	if opt.startTimeout <= 0 {
		return cfg, opt, errors.New("--start-timeout must be positive")
	}
	switch v := strings.TrimSpace(opt.principalMaxBytes); v {
	case "":
	case "none", "0":
		cfg.PrincipalMaxBytes = -1
	default:
		n, err := jsassets.ParseBytes(v)
		if err != nil {
			return cfg, opt, fmt.Errorf("--principal-max-bytes: %w", err)
		}
		cfg.PrincipalMaxBytes = n
	}
	switch v := strings.TrimSpace(opt.principalMaxEventBytes); v {
	case "":
	case "none", "0":
		cfg.PrincipalMaxEventBytes = -1
	default:
		n, err := jsassets.ParseBytes(v)
		if err != nil {
			return cfg, opt, fmt.Errorf("--principal-max-event-bytes: %w", err)
		}
		cfg.PrincipalMaxEventBytes = n
	}
	switch v := strings.TrimSpace(opt.scriptMemory); v {
	case "":
	case "none", "0":
		cfg.Programs.ScriptMemory = -1
	default:
		n, err := jsassets.ParseBytes(v)
		if err != nil {
			return cfg, opt, fmt.Errorf("--script-memory: %w", err)
		}
		cfg.Programs.ScriptMemory = n
	}
	if cfg.PrincipalMaxRuns == 0 {
		cfg.PrincipalMaxRuns = -1 // the flag's 0 is no bound
	} else if cfg.PrincipalMaxRuns < 0 {
		return cfg, opt, fmt.Errorf("--principal-max-runs %d: want 0 (no bound) or more", cfg.PrincipalMaxRuns)
	}
	eps, err := agent.ParseEndpoints(opt.modelEndpoints...)
	if err != nil {
		return cfg, opt, fmt.Errorf("--model-endpoint: %w", err)
	}
	cfg.Endpoints = eps
	if opt.scriptDir != "" {
		// The runner's default resolver plus script files, as `toolfleet dev`
		// builds it.
		dir, err := filepath.Abs(opt.scriptDir)
		if err == nil {
			var fi os.FileInfo
			if fi, err = os.Stat(dir); err == nil && !fi.IsDir() {
				err = fmt.Errorf("%s is not a folder", dir)
			}
		}
		if err != nil {
			return cfg, opt, fmt.Errorf("--script-dir: %w", err)
		}
		r := agent.NewResolver()
		r.KeyDir, r.Endpoints, r.ScriptDir = cfg.KeyDir, eps, dir
		cfg.Models = r
	}
	cfg.Logger = slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	if opt.triggers != "" {
		t, err := trigger.Load(opt.triggers)
		if err != nil {
			return cfg, opt, err
		}
		cfg.Triggers = t
	}
	return cfg, opt, cfg.Validate()
}

func run(ctx context.Context, args []string) error {
	cfg, opt, err := parse(args)
	if err != nil {
		return err
	}
	// OTEL_EXPORTER_OTLP_ENDPOINT turns tracing on (internal/telemetry).
	tracing, flush, err := telemetry.Setup(ctx, "toolfleet-orchestrator")
	if err != nil {
		return err
	}
	defer func() {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = flush(fctx)
	}()
	cfg.Tracing = tracing
	cfg.Metrics = metrics.New()
	if opt.metricsListen != "" {
		mlis, err := net.Listen("tcp", opt.metricsListen)
		if err != nil {
			return fmt.Errorf("--metrics-listen: %w", err)
		}
		defer telemetry.ServeMetrics(mlis, cfg.Metrics.Handler(), cfg.Logger)()
	}
	lis, err := net.Listen("tcp", opt.listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	return serve(ctx, cfg, opt.startTimeout, lis)
}

// serve answers health checks on lis while it starts the orchestrator, then
// runs it until ctx ends. It closes lis.
func serve(ctx context.Context, cfg runner.Config, startTimeout time.Duration, lis net.Listener) error {
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	defer func() {
		// Watch streams never end by themselves: stop gracefully, then hard.
		hs.Shutdown()
		stopped := make(chan struct{})
		go func() { srv.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(5 * time.Second):
			srv.Stop()
		}
		<-served
	}()

	startCtx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	o, err := startRetrying(startCtx, cfg, cfg.Logger)
	if err != nil {
		return err
	}
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	cfg.Logger.Info("orchestrator polling", "task_queue", cfg.TaskQueue, "temporal", cfg.TemporalAddress, "health", lis.Addr().String())
	select {
	case <-ctx.Done():
	case err := <-o.Failed():
		hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
		o.Stop()
		return fmt.Errorf("the Temporal worker stopped for good, exiting so that the orchestrator is restarted: %w", err)
	case err := <-served:
		served <- err // for the deferred stop
		o.Stop()
		return fmt.Errorf("health server: %w", err)
	}
	cfg.Logger.Info("stopping")
	hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	o.Stop()
	return nil
}
