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
// files in --model-key-dir, as each run's key reference says.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/toolfleet/toolfleet/internal/config"
	"github.com/toolfleet/toolfleet/orchestrator/runner"
	"github.com/toolfleet/toolfleet/orchestrator/trigger"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "orchestrator:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	var cfg runner.Config
	var logLevel, triggers string
	fs := pflag.NewFlagSet("orchestrator", pflag.ContinueOnError)
	fs.StringVar(&cfg.TemporalAddress, "temporal-address", "127.0.0.1:7233", "Temporal frontend host:port")
	fs.StringVar(&cfg.Namespace, "namespace", "default", "Temporal namespace")
	fs.StringVar(&cfg.TaskQueue, "task-queue", "toolfleet-agent", "Temporal task queue of agent runs")
	fs.StringVar(&cfg.NATSURL, "nats-url", "nats://127.0.0.1:4222", "NATS server URL")
	fs.StringVar(&cfg.GatewayAddress, "gateway-address", "127.0.0.1:8080", "tool gateway host:port (gRPC)")
	fs.StringVar(&cfg.GatewayToken, "gateway-token", "", "bearer token of the orchestrator at the gateway (scopes tools:delegate, tools:approve)")
	fs.StringVar(&cfg.KeyDir, "model-key-dir", "", "folder that model key references file:NAME read from (empty: file references refused)")
	fs.IntVar(&cfg.MaxConcurrentActivities, "max-concurrent-activities", 200, "activities in flight in this process at most")
	fs.DurationVar(&cfg.StopTimeout, "stop-timeout", 10*time.Second, "how long in-flight activities may finish on SIGTERM")
	fs.StringVar(&triggers, "triggers", "", "trigger file: JetStream subjects that start programs and agent runs (docs/programs.md)")
	fs.StringVar(&logLevel, "log-level", "info", "least level of logs: debug, info, warn, error")
	config.BindEnv(fs, "TOOLFLEET")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := config.ApplyEnv(fs, "TOOLFLEET"); err != nil {
		return err
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(logLevel)); err != nil {
		return fmt.Errorf("--log-level %q: want debug, info, warn or error", logLevel)
	}
	cfg.Logger = slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	if err := cfg.Validate(); err != nil {
		return err
	}
	if triggers != "" {
		t, err := trigger.Load(triggers)
		if err != nil {
			return err
		}
		cfg.Triggers = t
	}
	startCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	o, err := runner.Start(startCtx, cfg)
	if err != nil {
		return err
	}
	cfg.Logger.Info("orchestrator polling", "task_queue", cfg.TaskQueue, "temporal", cfg.TemporalAddress)
	<-ctx.Done()
	cfg.Logger.Info("stopping")
	o.Stop()
	return nil
}
