package tool

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/toolfleet/toolfleet/internal/telemetry"
	"github.com/toolfleet/toolfleet/sdk/jsassets"
	"github.com/toolfleet/toolfleet/sdk/natsconn"
)

// Environment variables read by [Main] as flag defaults.
const (
	EnvListen    = "TOOLFLEET_LISTEN"
	EnvNATSURL   = "TOOLFLEET_NATS_URL"
	EnvAdvertise = "TOOLFLEET_ADVERTISE_ADDR"
	EnvLogLevel  = "TOOLFLEET_LOG_LEVEL"
	// EnvHealthListen is the default of --health-listen.
	EnvHealthListen = "TOOLFLEET_HEALTH_LISTEN"
	// EnvMetricsListen is the default of --metrics-listen.
	EnvMetricsListen = "TOOLFLEET_METRICS_LISTEN"
)

// Main is the whole main function of a worker binary: it parses --listen, --nats,
// --advertise and --log-level (defaults from TOOLFLEET_LISTEN, TOOLFLEET_NATS_URL,
// TOOLFLEET_ADVERTISE_ADDR, TOOLFLEET_LOG_LEVEL) and the NATS credential and TLS
// flags of [natsconn.Options.AddFlags] (--nats-creds, --nats-ca, ...; defaults
// from TOOLFLEET_NATS_*) and --tls-cert, --tls-key, --tls-client-ca ([TLSConfig];
// defaults from TOOLFLEET_TLS_*) and --health-listen (a plain-text health port
// for probes) and --metrics-listen (Prometheus metrics at GET /metrics; off
// when empty), logs JSON to stderr, lets
// register add the services, serves until SIGINT or SIGTERM, stops gracefully and
// exits with status 1 on failure (2 on bad flags).
func Main(name string, register func(w *Worker) error) {
	MainWithFlags(name, nil, register)
}

// MainWithFlags is [Main] for a worker with flags of its own: flags adds them
// to the flag set before the command line is parsed (register runs after, so
// it reads their values; a value it cannot use is an error of register, exit
// status 1). A nil flags adds none.
func MainWithFlags(name string, flags func(fs *flag.FlagSet), register func(w *Worker) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := runWithFlags(ctx, name, os.Args[1:], os.Stderr, flags, register)
	stop()
	os.Exit(code)
}

// run is Main without the process: it serves until ctx is done and returns the
// exit code.
func run(ctx context.Context, name string, args []string, stderr io.Writer, register func(w *Worker) error) int {
	return runWithFlags(ctx, name, args, stderr, nil, register)
}

// runWithFlags is MainWithFlags without the process.
func runWithFlags(ctx context.Context, name string, args []string, stderr io.Writer, flags func(fs *flag.FlagSet), register func(w *Worker) error) int {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", envOr(EnvListen, DefaultListen), "host:port to serve gRPC on (env "+EnvListen+")")
	natsURL := fs.String("nats", os.Getenv(EnvNATSURL), "NATS URL for registry announcements; empty = none (env "+EnvNATSURL+")")
	advertise := fs.String("advertise", os.Getenv(EnvAdvertise), "address announced to the registry; default = the listen address (env "+EnvAdvertise+")")
	level := fs.String("log-level", envOr(EnvLogLevel, "info"), "debug, info, warn or error (env "+EnvLogLevel+")")
	interval := fs.Duration("announce-interval", DefaultAnnounceInterval, "heartbeat period; ttl = 3x")
	var natsOpts natsconn.Options
	natsOpts.AddFlags(fs)
	var assets jsassets.Config
	assets.AddFlags(fs)
	var tlsCfg TLSConfig
	fs.StringVar(&tlsCfg.CertFile, "tls-cert", os.Getenv(EnvTLSCert), "serve gRPC over TLS with this certificate (env "+EnvTLSCert+")")
	fs.StringVar(&tlsCfg.KeyFile, "tls-key", os.Getenv(EnvTLSKey), "key of --tls-cert (env "+EnvTLSKey+")")
	healthListen := fs.String("health-listen", os.Getenv(EnvHealthListen), "host:port serving only grpc.health.v1 in plain text, for probes when TLS is on (env "+EnvHealthListen+")")
	metricsListen := fs.String("metrics-listen", os.Getenv(EnvMetricsListen), "host:port serving Prometheus metrics at GET /metrics; empty = none (env "+EnvMetricsListen+")")
	fs.StringVar(&tlsCfg.ClientCAFile, "tls-client-ca", os.Getenv(EnvTLSClientCA), "require callers' certificates signed by these CAs (mTLS) (env "+EnvTLSClientCA+")")
	if flags != nil {
		flags(fs)
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*level)); err != nil {
		fmt.Fprintf(stderr, "%s: bad --log-level %q: %v\n", name, *level, err)
		return 2
	}
	if err := assets.Validate(); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 2
	}
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: lvl})).With("service", name)
	if stderr == io.Writer(os.Stderr) {
		slog.SetDefault(log) // the process's own stderr: libraries log the same way
	}

	// OTEL_EXPORTER_OTLP_ENDPOINT turns tracing on: the worker's server spans
	// (always made, with the global provider) are then exported.
	_, flush, err := telemetry.Setup(ctx, name)
	if err != nil {
		log.Error("tracing", "error", err)
		return 1
	}
	defer func() {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = flush(fctx)
	}()

	var hook MetricsHook
	if *metricsListen != "" {
		lis, err := (&net.ListenConfig{}).Listen(ctx, "tcp", *metricsListen)
		if err != nil {
			log.Error("--metrics-listen", "error", err)
			return 1
		}
		m := NewMetrics()
		hook = m.Hook
		defer telemetry.ServeMetrics(lis, m.Handler(), log)()
	}

	w, err := NewWorker(Config{
		Name:             name,
		Listen:           *listen,
		NATSURL:          *natsURL,
		NATS:             natsOpts,
		Assets:           assets,
		TLS:              tlsCfg,
		HealthListen:     *healthListen,
		AdvertiseAddr:    *advertise,
		Logger:           log,
		AnnounceInterval: *interval,
		ShutdownTimeout:  DefaultShutdownTimeout,
		Metrics:          hook,
	})
	if err != nil {
		log.Error("create worker", "error", err)
		return 1
	}
	if err := register(w); err != nil {
		log.Error("register services", "error", err)
		return 1
	}
	if err := w.Run(ctx); err != nil {
		log.Error("worker failed", "error", err)
		return 1
	}
	return 0
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
