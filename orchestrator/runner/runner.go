// Package runner is the orchestrator process: it connects to Temporal, NATS
// and the gateway and runs a Temporal worker for agent runs and Starlark
// programs on a task queue.
// Replicas share the work by polling the same queue; nothing else
// coordinates them. It never links the embedded servers of internal/devstack,
// so cmd/orchestrator stays a production binary; `toolfleet dev` runs the
// same Run in-process.
package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"

	"github.com/toolfleet/toolfleet/orchestrator/agent"
	"github.com/toolfleet/toolfleet/orchestrator/agentapi"
	"github.com/toolfleet/toolfleet/orchestrator/program"
	"github.com/toolfleet/toolfleet/orchestrator/trigger"
	tfclient "github.com/toolfleet/toolfleet/sdk/client"
)

// Config configures the orchestrator process.
type Config struct {
	// TemporalAddress is the Temporal frontend (host:port).
	TemporalAddress string
	// Namespace is the Temporal namespace. Default "default".
	Namespace string
	// TaskQueue the worker polls. Default agent.TaskQueue.
	TaskQueue string
	// NATSURL is the NATS server (transcripts, blobs, run events, token deltas).
	NATSURL string
	// GatewayAddress is the tool gateway (host:port, gRPC).
	GatewayAddress string
	// GatewayToken is the orchestrator's own bearer token at the gateway; it
	// needs the tools:delegate scope (and tools:approve for approved calls).
	GatewayToken string
	// KeyDir is the folder model key references "file:NAME" read from.
	KeyDir string
	// Models overrides the model resolver (tests, demos). Default: an
	// agent.Resolver with KeyDir.
	Models agent.Models
	// Triggers, when set, start programs and agent runs from JetStream
	// messages (orchestrator/trigger; load it with trigger.Load).
	Triggers *trigger.Config
	// MemoryStorage keeps transcripts and events in memory (tests).
	MemoryStorage bool
	// MaxConcurrentActivities bounds activities in flight in this process. Default 200.
	MaxConcurrentActivities int
	// StopTimeout bounds the graceful stop. Default 10s.
	StopTimeout time.Duration
	// Logger receives the process's logs. Default slog.Default().
	Logger *slog.Logger
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
	return errors.Join(errs...)
}

func (c *Config) defaults() {
	if c.Namespace == "" {
		c.Namespace = "default"
	}
	if c.TaskQueue == "" {
		c.TaskQueue = agent.TaskQueue
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
		c.Models = r
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
	// Runs starts and steers runs through this process's connections.
	Runs *agent.Runs
	// Programs starts and steers Starlark programs the same way.
	Programs *program.Programs
}

// Start connects everything and starts polling; Stop undoes it.
func Start(ctx context.Context, cfg Config) (_ *Orchestrator, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.defaults()
	o := &Orchestrator{cfg: cfg}
	defer func() {
		if err != nil {
			o.Stop()
		}
	}()
	if o.nc, err = nats.Connect(cfg.NATSURL, nats.Name("toolfleet-orchestrator"), nats.MaxReconnects(-1)); err != nil {
		return nil, fmt.Errorf("connect to NATS: %w", err)
	}
	js, err := jetstream.New(o.nc)
	if err != nil {
		return nil, fmt.Errorf("JetStream: %w", err)
	}
	o.js = js
	store, err := agent.OpenStore(ctx, js, agent.StoreConfig{Memory: cfg.MemoryStorage})
	if err != nil {
		return nil, err
	}
	events, err := agent.OpenEvents(ctx, o.nc, js, agent.EventStreamConfig("", cfg.MemoryStorage))
	if err != nil {
		return nil, err
	}
	opts := []tfclient.Option{tfclient.WithRetry(tfclient.RetryPolicy{MaxAttempts: 1})}
	if cfg.GatewayToken != "" {
		opts = append(opts, tfclient.WithToken(cfg.GatewayToken))
	}
	if o.gateway, err = tfclient.New(cfg.GatewayAddress, opts...); err != nil {
		return nil, err
	}
	if o.temporal, err = client.DialContext(ctx, client.Options{HostPort: cfg.TemporalAddress, Namespace: cfg.Namespace,
		Logger: tlog.NewStructuredLogger(cfg.Logger)}); err != nil {
		return nil, fmt.Errorf("connect to Temporal at %s: %w", cfg.TemporalAddress, err)
	}
	o.worker = worker.New(o.temporal, cfg.TaskQueue, worker.Options{
		MaxConcurrentActivityExecutionSize: cfg.MaxConcurrentActivities,
		WorkerStopTimeout:                  cfg.StopTimeout,
		DeadlockDetectionTimeout:           program.DeadlockDetectionTimeout, // scripts compute between yields
	})
	agent.Register(o.worker, &agent.Activities{Store: store, Events: events, Gateway: o.gateway, Models: cfg.Models})
	program.Register(o.worker, &program.Activities{Gateway: o.gateway, Events: events})
	if err := o.worker.Start(); err != nil {
		return nil, fmt.Errorf("start the Temporal worker: %w", err)
	}
	o.Runs = &agent.Runs{Temporal: o.temporal, Store: store, TaskQueue: cfg.TaskQueue}
	o.Programs = &program.Programs{Temporal: o.temporal, TaskQueue: cfg.TaskQueue}
	if cfg.Triggers != nil {
		if o.triggers, err = trigger.Start(ctx, js, cfg.Triggers, trigger.Options{Programs: o.Programs, Runs: o.Runs,
			MemoryStorage: cfg.MemoryStorage, Logger: cfg.Logger}); err != nil {
			return nil, err
		}
	}
	return o, nil
}

// AgentService returns the AgentService over this process's connections,
// authenticating callers with auth; mount its Handler at the gateway.
func (o *Orchestrator) AgentService(auth agentapi.Authenticator) *agentapi.Service {
	return &agentapi.Service{Runs: o.Runs, JS: o.js, NC: o.nc, Auth: auth, Log: o.cfg.Logger}
}

// ProgramService returns the ProgramService over this process's
// connections, authenticating callers with auth; mount it at the gateway.
func (o *Orchestrator) ProgramService(auth agentapi.Authenticator) *program.Service {
	return &program.Service{Programs: o.Programs, Events: o.js, Auth: auth, Triggers: o.cfg.Triggers.Proto}
}

// Stop stops polling, lets in-flight activities finish within the stop
// timeout, then closes the connections.
func (o *Orchestrator) Stop() {
	if o.triggers != nil {
		o.triggers.Stop()
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
