package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/spf13/pflag"

	"github.com/toolfleet/toolfleet/internal/telemetry"
	"github.com/toolfleet/toolfleet/services/gateway"
	"github.com/toolfleet/toolfleet/services/gateway/delegation"
)

// Exit codes of the binary.
const (
	exitOK      = 0
	exitFailed  = 1
	exitBadArgs = 2
)

// run is main without the process: it parses and validates the configuration,
// serves until ctx is done, and returns the exit code.
func run(ctx context.Context, args []string, stderr io.Writer) int {
	cfg, err := parse(args)
	if errors.Is(err, pflag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "gateway: %v\n", err)
		return exitBadArgs
	}
	log := newLogger(cfg, stderr)
	// OTEL_EXPORTER_OTLP_ENDPOINT turns tracing on (internal/telemetry).
	tracing, flush, err := telemetry.Setup(ctx, "toolfleet-gateway")
	if err != nil {
		log.Error("tracing", "error", err)
		return exitFailed
	}
	defer func() {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = flush(fctx)
	}()
	cfg.Tracing = tracing
	if err := serve(ctx, cfg, log, nil); err != nil {
		log.Error("gateway failed", "error", err)
		return exitFailed
	}
	return exitOK
}

// serve runs the gateway until ctx is done. started, when not nil, receives the
// gateway once it listens (tests use it to find the address).
func serve(ctx context.Context, cfg Config, log *slog.Logger, started chan<- *gateway.Gateway) error {
	orch := newOrchestration(cfg, log)
	cons, closeConsole, err := cfg.Console.server(&cfg, log)
	if err != nil {
		return fmt.Errorf("configure the console: %w", err)
	}
	defer closeConsole()
	creds, err := delegation.Open(ctx, cfg.ConnectionsFile, cfg.NATSURL, cfg.NATS, cfg.Assets, log)
	if err != nil {
		return err
	}
	defer creds.Close()
	creds.ResumeWith(&orch.agents, &orch.programs)
	mounts := append(orch.mounts(), creds.Mounts()...)
	gcfg, err := cfg.gatewayConfig(log, append(mounts, consoleMounts(cons)...))
	if err != nil {
		return err
	}
	gcfg.MCPTasks = orch.mcpTasks(creds.API())
	gcfg.Connections = creds.Tokens()
	gcfg.Exchange = creds.Exchange()
	g, err := gateway.New(ctx, gcfg)
	if err != nil {
		return fmt.Errorf("configure the gateway: %w", err)
	}
	creds.Serving(g)
	// Runs and programs connect in the background; their calls are
	// UNAVAILABLE (and their health NOT_SERVING) until then. The goroutine is
	// the gateway's: it ends with ctx, before serve returns.
	octx, ostop := context.WithCancel(ctx)
	orchDone := make(chan struct{})
	go func() {
		defer close(orchDone)
		if err := orch.run(octx, g); err != nil {
			log.Error("runs and programs are not served", "error", err)
		}
	}()
	defer func() {
		ostop()
		<-orchDone
	}()
	if cons != nil {
		// The console calls the APIs at the gateway's own address, known
		// once it listens.
		go func() {
			select {
			case <-g.Ready():
				cons.Connect(selfURL(g.Addr()))
			case <-ctx.Done():
			}
		}()
	}
	if started != nil {
		go func() {
			select {
			case <-g.Ready():
				started <- g
			case <-ctx.Done():
			}
		}()
	}
	// Run returns within ShutdownTimeout of ctx being done: health turns
	// NOT_SERVING first, so Kubernetes stops routing while calls drain.
	return g.Run(ctx)
}

func newLogger(cfg Config, w io.Writer) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(cfg.LogLevel)) // validated
	opts := &slog.HandlerOptions{Level: lvl}
	var h slog.Handler = slog.NewJSONHandler(w, opts)
	if cfg.LogFormat == "text" {
		h = slog.NewTextHandler(w, opts)
	}
	return slog.New(h).With("service", "gateway")
}
