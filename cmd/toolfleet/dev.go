package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/toolfleet/toolfleet/internal/config"
	"github.com/toolfleet/toolfleet/internal/devstack"
	"github.com/toolfleet/toolfleet/internal/loopback"
	"github.com/toolfleet/toolfleet/internal/natsx"
	"github.com/toolfleet/toolfleet/internal/telemetry"
	"github.com/toolfleet/toolfleet/orchestrator/agent"
	"github.com/toolfleet/toolfleet/orchestrator/ids"
	"github.com/toolfleet/toolfleet/orchestrator/metrics"
	"github.com/toolfleet/toolfleet/orchestrator/runner"
	"github.com/toolfleet/toolfleet/orchestrator/trigger"
	"github.com/toolfleet/toolfleet/sdk/jsassets"
	"github.com/toolfleet/toolfleet/sdk/natsconn"
	"github.com/toolfleet/toolfleet/services/console"
	"github.com/toolfleet/toolfleet/services/gateway"
	"github.com/toolfleet/toolfleet/services/gateway/delegation"
	"github.com/toolfleet/toolfleet/services/gateway/ratelimit"
)

// devConfig is the configuration of `toolfleet dev`, from flags and TOOLFLEET_* env vars.
type devConfig struct {
	DataDir       string
	Host          string
	NATSPort      int
	TemporalPort  int
	UIPort        int
	Namespace     string
	LogLevel      string
	StopTimeout   time.Duration
	StockTemporal bool
	GatewayPort   int
	JWTSecret     string
	// AllowedOrigins are browser origins the gateway trusts (e.g. an MCP inspector).
	AllowedOrigins []string
	// NATS is the credential the embedded NATS requires and the fleet uses.
	NATS natsconn.Options
	// Triggers is a trigger file (docs/programs.md).
	Triggers string
	// Assets sizes every JetStream asset of the fleet (--js-*; the dev
	// profile by default: a few hundred MiB in all).
	Assets jsassets.Config
	// ModelEndpoints bind model keys to base URLs (agent.ParseEndpoints).
	ModelEndpoints []string
	// ModelKeyDir is where file: key references are read from.
	ModelKeyDir string
	// ScriptDir is where scripted:NAME.yaml script files are read from.
	ScriptDir string
	// Workers are folders of worker main packages run from source (--worker).
	Workers []string
	// DevFile is where the addresses are written for the CLI ("" = nowhere).
	DevFile string
	// Conformance also serves the MCP conformance suite's fixture tools.
	Conformance bool
	// LimitsFile holds the gateway's rate limits and quotas ("" = none).
	LimitsFile string
	// StoreShare is the gateway's --store-share (gateway.ParseStoreShare).
	StoreShare string
	// OIDC is an identity provider for the gateway and the console's
	// sign-in (devoidc.go).
	OIDC devOIDC
	// ConnectionsFile configures delegated credentials (docs/credentials.md; "" = none).
	ConnectionsFile string
	// NoOrchestrator starts no orchestrator in the process: one started
	// separately (cmd/orchestrator) runs the agent runs and programs, so a
	// test can kill it (docs/reliability.md).
	NoOrchestrator bool
}

func (c devConfig) validate() error {
	for name, p := range map[string]int{"nats-port": c.NATSPort, "temporal-port": c.TemporalPort, "temporal-ui-port": c.UIPort, "gateway-port": c.GatewayPort} {
		if p < 0 || p > 65535 {
			return fmt.Errorf("--%s %d: must be 0..65535", name, p)
		}
	}
	if c.DataDir == "" {
		return fmt.Errorf("--data-dir must not be empty")
	}
	if c.Namespace == "" {
		return fmt.Errorf("--namespace must not be empty")
	}
	if c.JWTSecret == "" && !loopback.Host(c.Host) {
		return fmt.Errorf("--host %s is not loopback: the gateway needs auth, set --gateway-jwt-secret", c.Host)
	}
	if err := c.OIDC.validate(c.JWTSecret); err != nil {
		return err
	}
	if c.StopTimeout <= 0 {
		return fmt.Errorf("--stop-timeout must be positive")
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(c.LogLevel)); err != nil {
		return fmt.Errorf("--log-level %q: want debug, info, warn or error", c.LogLevel)
	}
	if _, err := natsx.RequireAuth(c.NATS); err != nil {
		return fmt.Errorf("NATS credentials: %w", err)
	}
	if c.NoOrchestrator && c.Triggers != "" {
		return fmt.Errorf("--triggers is the orchestrator's: with --no-orchestrator give the file to cmd/orchestrator --triggers")
	}
	return c.Assets.Validate()
}

func newDevCommand() *cobra.Command {
	cfg := devConfig{Assets: jsassets.Config{Profile: jsassets.ProfileDev}}
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run the whole fleet in one process on embedded NATS and Temporal",
		Long: `dev starts an embedded NATS server (JetStream on disk) and an embedded Temporal
server (SQLite, tuned for low latency) with the Temporal Web UI, keeping data under
--data-dir so that a restart resumes where it stopped. The usual ports are the
defaults, so the nats and temporal CLIs work without flags. It also starts every
bundled tool worker on a free loopback port, announcing itself on NATS, and the
tool gateway (--gateway-port), which finds the workers through those
announcements. With --nats-user/--nats-password, --nats-token or --nats-nkey the
embedded NATS requires that credential and the fleet uses it. With
--no-orchestrator it runs no orchestrator: start cmd/orchestrator (the banner
prints its command line) to run agent runs and programs, and kill or restart it
on its own. Ctrl-C stops it.`,
		Args: cobra.NoArgs,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			return config.ApplyEnv(cmd.Flags(), "TOOLFLEET")
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cfg.validate(); err != nil {
				return err
			}
			return runDev(cmd.Context(), cfg, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.DataDir, "data-dir", ".toolfleet", "folder for NATS JetStream and Temporal data")
	f.StringVar(&cfg.Host, "host", "127.0.0.1", "address every server binds to")
	f.IntVar(&cfg.NATSPort, "nats-port", 4222, "NATS client port (0 = any free port)")
	f.IntVar(&cfg.TemporalPort, "temporal-port", 7233, "Temporal frontend gRPC port (0 = any free port)")
	f.IntVar(&cfg.UIPort, "temporal-ui-port", 8233, "Temporal Web UI port (0 = no UI)")
	f.StringVar(&cfg.Namespace, "namespace", "default", "Temporal namespace to create")
	f.StringVar(&cfg.LogLevel, "log-level", "warn", "least level of server logs on stderr: debug, info, warn, error")
	f.DurationVar(&cfg.StopTimeout, "stop-timeout", 20*time.Second, "how long a clean stop may take before the process exits anyway")
	f.BoolVar(&cfg.StockTemporal, "stock-temporal", false, "run Temporal with its stock (slow-polling) dynamic config, for comparisons")
	f.IntVar(&cfg.GatewayPort, "gateway-port", 8080, "tool gateway port: gRPC, Connect, gRPC-Web and OXP HTTP (0 = any free port)")
	f.StringVar(&cfg.JWTSecret, "gateway-jwt-secret", "", "HS256 secret for bearer tokens at the gateway; empty = auth off (only allowed on a loopback --host)")
	f.StringSliceVar(&cfg.AllowedOrigins, "gateway-allowed-origins", nil, "browser origins (http://localhost:6274) the gateway lets make state-changing requests and use /mcp; default none")
	f.StringVar(&cfg.Triggers, "triggers", "", "trigger file: JetStream subjects that start programs and agent runs (docs/programs.md)")
	f.StringArrayVar(&cfg.ModelEndpoints, "model-endpoint", []string{agent.LoopbackWithoutKey}, "KEYREF=URL[,URL...]: the base URLs a model key may be sent to (docs/agents.md); the default lets keyless models on this machine be called")
	f.StringVar(&cfg.ModelKeyDir, "model-key-dir", "", "folder that model key references file:NAME read from (empty: file references refused)")
	f.StringArrayVar(&cfg.Workers, "worker", nil, "folder of a worker's main package to build, run and restart on change (repeatable; e.g. --worker . in a toolkit's repository)")
	f.BoolVar(&cfg.Conformance, "conformance", false, "also serve the Conformance toolkit: the fixture tools of the official MCP conformance suite, under the names it calls (docs/mcp.md)")
	f.StringVar(&cfg.ConnectionsFile, "connections-file", "", "JSON file of the OAuth providers you connect your accounts at, for tools that act with them (docs/credentials.md); empty: such tools are refused")
	f.StringVar(&cfg.StoreShare, "store-share", "", "the part of each gateway store (toolfleet_calls, toolfleet_results, TOOLFLEET_CALL_EVENTS) one principal may hold, e.g. 1/8 or 12.5%; empty: 1/8; none: no share (docs/operations.md \"Store shares\")")
	f.StringVar(&cfg.LimitsFile, "limits-file", "", "YAML or JSON file of the gateway's rate limits and quotas per principal and per tool (docs/operations.md); empty: no limits")
	f.StringVar(&cfg.DevFile, "dev-file", defaultDevFile, "file the fleet's addresses are written to while dev runs, where the other toolfleet commands look for the gateway (empty: none)")
	f.BoolVar(&cfg.NoOrchestrator, "no-orchestrator", false, "start no orchestrator in this process: run cmd/orchestrator against this dev's NATS, Temporal and gateway (the banner prints its command line); the gateway still serves agent runs and programs, through Temporal, once that orchestrator has made its buckets")
	f.StringVar(&cfg.ScriptDir, "script-dir", ".", "folder that scripted:NAME.yaml model scripts are read from (docs/agents.md; empty: script files refused)")
	cfg.OIDC.addFlags(f)
	config.BindEnv(f, "TOOLFLEET")
	// After BindEnv: these name their TOOLFLEET_NATS_* and TOOLFLEET_JS_*
	// variables themselves.
	cfg.NATS.AddFlags(f)
	cfg.Assets.AddFlags(f)
	cmd.AddCommand(newDevTokenCommand(), newDevHydraLoginCommand())
	return cmd
}

// devModels is the orchestrator's model resolver: the runner's default plus
// script files from cfg.ScriptDir.
func devModels(cfg devConfig, endpoints *agent.Endpoints) (*agent.Resolver, error) {
	r := agent.NewResolver()
	r.KeyDir, r.Endpoints = cfg.ModelKeyDir, endpoints
	if cfg.ScriptDir != "" {
		dir, err := filepath.Abs(cfg.ScriptDir)
		if err != nil {
			return nil, fmt.Errorf("--script-dir: %w", err)
		}
		r.ScriptDir = dir
	}
	return r, nil
}

func runDev(ctx context.Context, cfg devConfig, stdout, stderr io.Writer) error {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(cfg.LogLevel))
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lvl}))

	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return fmt.Errorf("data folder: %w", err)
	}
	endpoints, err := agent.ParseEndpoints(cfg.ModelEndpoints...)
	if err != nil {
		return fmt.Errorf("--model-endpoint: %w", err)
	}
	if err := checkDevWorkers(cfg.Workers); err != nil {
		return err
	}
	var limits ratelimit.Config
	if cfg.LimitsFile != "" {
		if limits.Rules, err = ratelimit.LoadFile(cfg.LimitsFile); err != nil {
			return fmt.Errorf("--limits-file: %w", err)
		}
	}
	if _, err := gateway.ParseStoreShare(cfg.StoreShare); err != nil {
		return fmt.Errorf("--store-share: %w", err)
	}
	var triggers *trigger.Config
	if cfg.Triggers != "" {
		if triggers, err = trigger.Load(cfg.Triggers); err != nil {
			return err
		}
	}
	tracing, flush, err := telemetry.Setup(ctx, "toolfleet-dev")
	if err != nil {
		return err
	}
	defer func() {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = flush(fctx)
	}()
	if err := checkDevCanStart(cfg); err != nil {
		return err
	}
	startCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	began := time.Now()
	requireAuth, err := natsx.RequireAuth(cfg.NATS)
	if err != nil {
		return fmt.Errorf("NATS credentials: %w", err)
	}
	stack, err := devstack.Start(startCtx, devstack.Config{
		NATSConfigure: requireAuth,
		Host:          cfg.Host,
		DataDir:       dataDir,
		NATSPort:      cfg.NATSPort,
		TemporalPort:  cfg.TemporalPort,
		UIPort:        cfg.UIPort,
		Namespace:     cfg.Namespace,
		StockTemporal: cfg.StockTemporal,
		Logger:        logger,
	})
	if err != nil {
		return fmt.Errorf("start the dev stack: %w", err)
	}

	svc, err := startDevServices(startCtx, stack, cfg, devServiceOptions{Logger: logger, Tracing: tracing,
		Triggers: triggers, Endpoints: endpoints, Limits: limits})
	if err != nil {
		stack.Stop()
		return err
	}
	fl := svc.fleet
	stopWorkers, err := startDevWorkers(cfg.Workers, stack.NATS.URL(), cfg.NATS, fl.Gateway.WorkerAdmission, stderr, logger)
	if err != nil {
		_ = svc.stop()
		stack.Stop()
		return err
	}

	if cfg.DevFile != "" {
		removeDevFile, err := writeDevFile(cfg.DevFile, devAddresses{PID: os.Getpid(), Gateway: fl.Gateway.Addr(),
			GatewayURL: "http://" + fl.Gateway.Addr(), Auth: cfg.JWTSecret != "", NATS: stack.NATS.URL(),
			Temporal: stack.Temporal.Address(), TemporalUI: stack.UIAddress(), Namespace: stack.Namespace()})
		if err != nil {
			logger.Warn("the CLI will not find this dev without --gateway", "error", err)
		} else {
			defer removeDevFile()
		}
	}
	fmt.Fprintf(stdout, "toolfleet dev is up in %s (data in %s)\n", time.Since(began).Round(time.Millisecond), dataDir)
	fmt.Fprintf(stdout, "  NATS         %s   (JetStream ready)\n", stack.NATS.URL())
	fmt.Fprintf(stdout, "  Temporal     %s   (namespace %q ready)\n", stack.Temporal.Address(), stack.Namespace())
	if ui := stack.UIAddress(); ui != "" {
		fmt.Fprintf(stdout, "  Temporal UI  %s\n", ui)
	}
	natsHint := stack.NATS.URL()
	if cfg.NATS != (natsconn.Options{}) {
		natsHint = "" // the hint would need the credential
	}
	printFleet(stdout, fl, cfg.JWTSecret != "", natsHint)
	fmt.Fprintf(stdout, "  Console      http://%s%s   (docs/console.md)\n", fl.Gateway.Addr(), console.Prefix)
	cfg.OIDC.banner(stdout)
	for _, w := range cfg.Workers {
		fmt.Fprintf(stdout, "  Your worker  %s   (from source: rebuilt on change and swapped in once ready; building/ready lines and its output on stderr)\n", w)
	}
	fmt.Fprintf(stdout, "  Metrics      http://%s/metrics (gateway), http://%s%s (orchestrator)\n", fl.Gateway.Addr(), fl.Gateway.Addr(), OrchestratorMetricsPath)
	if cfg.NoOrchestrator {
		fmt.Fprintf(stdout, "  Orchestrator none in this process (--no-orchestrator): runs and programs on task queue %q are served once one runs:\n    %s\n",
			ids.TaskQueue, externalOrchestratorCommand(stack, cfg, fl.Gateway.Addr()))
	}
	fmt.Fprintf(stdout, "  Orchestrator agent runs and programs on task queue %q; try (docs/agents.md, docs/programs.md):\n", ids.TaskQueue)
	if triggers != nil {
		fmt.Fprintf(stdout, "  Triggers     %d from %s\n", len(triggers.Triggers), cfg.Triggers)
	}
	fmt.Fprintf(stdout, "    no key needed: toolfleet agent run --gateway %s --model scripted:demo \"add 2 and 3\" --watch\n", fl.Gateway.Addr())
	fmt.Fprintf(stdout, "    with OPENAI_API_KEY=… in this shell: toolfleet agent run --gateway %s --model openai:gpt-4o-mini \"What is 6 times 7?\" --watch\n", fl.Gateway.Addr())
	fmt.Fprintln(stdout, "Press Ctrl-C to stop.")

	<-ctx.Done()
	fmt.Fprintln(stdout, "stopping...")
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		stopWorkers() // first: their NOT_SERVING reaches the gateway while NATS is up
		if err := svc.stop(); err != nil {
			logger.Warn("gateway and workers stopped with errors", "error", err)
		}
		stack.Stop()
	}()
	select {
	case <-stopped:
		fmt.Fprintln(stdout, "stopped")
		return nil
	case <-time.After(cfg.StopTimeout):
		return fmt.Errorf("the dev stack did not stop within %s; data in %s may need a clean restart", cfg.StopTimeout, dataDir)
	}
}

// devServices are what `toolfleet dev` runs on its stack: the gateway (with
// the AgentService, the ProgramService and so MCP tasks mounted) and the
// bundled workers, and the orchestrator that serves those services.
type devServices struct {
	fleet *fleet
	orch  *runner.Orchestrator // nil with --no-orchestrator
	// stopExternal ends serving runs and programs for an external
	// orchestrator (--no-orchestrator; else nil).
	stopExternal func()
	// creds are the delegated credentials (--connections-file).
	creds *delegation.Wiring
	// closeConsole ends the console's NATS connection.
	closeConsole func()
}

// devServiceOptions are what runDev sets up before the services start.
type devServiceOptions struct {
	Logger    *slog.Logger
	Tracing   bool
	Triggers  *trigger.Config
	Endpoints *agent.Endpoints
	// MemoryStorage keeps the orchestrator's transcripts and events in
	// memory (tests; dev keeps them in the stack's JetStream).
	MemoryStorage bool
	// Limits are the gateway's rate limits and quotas (--limits-file).
	Limits ratelimit.Config
}

// startDevServices starts the gateway and the bundled workers on stack, waits
// for their toolkits, then starts the orchestrator and serves the mounted
// services with it. On an error nothing it started keeps running (the stack
// is the caller's). Tests run the same fleet with it.
func startDevServices(ctx context.Context, stack *devstack.Stack, cfg devConfig, o devServiceOptions) (*devServices, error) {
	agents, programs, orchMetrics := &agentMount{}, &programMount{}, metrics.New()
	cons, closeConsole, err := devConsole(cfg, stack)
	if err != nil {
		return nil, err
	}
	creds, err := delegation.Open(ctx, cfg.ConnectionsFile, stack.NATS.URL(), cfg.NATS, cfg.Assets, o.Logger)
	if err != nil {
		closeConsole()
		return nil, err
	}
	started := false
	defer func() {
		if !started {
			creds.Close()
			closeConsole()
		}
	}()
	creds.ResumeWith(&agents.late, &programs.late)
	mounts := append([]gateway.Mount{agents.mount(), programs.mount(), metricsMount(orchMetrics), consoleMount(cons)}, creds.Mounts()...)
	fl, err := startFleet(ctx, fleetConfig{Host: cfg.Host, GatewayPort: cfg.GatewayPort, JWTSecret: cfg.JWTSecret, IdP: cfg.OIDC,
		AllowedOrigins: cfg.AllowedOrigins, NATSURL: stack.NATS.URL(), NATS: cfg.NATS, Assets: cfg.Assets, Logger: o.Logger,
		Mounts: mounts, MCPTasks: mcpTasks(agents, programs, creds.API()), Tracing: o.Tracing, Conformance: cfg.Conformance,
		Limits: o.Limits, StoreShare: cfg.StoreShare, Connections: creds.Tokens(), Exchange: creds.Exchange()})
	if err == nil {
		creds.Serving(fl.Gateway)
		cons.Connect("http://" + fl.Gateway.Addr())
		err = fl.waitToolkits(ctx, fl.Toolkits...)
		if err != nil {
			_ = fl.stop()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("start the gateway and workers: %w", err)
	}

	if cfg.NoOrchestrator {
		stopExternal, err := serveExternal(stack, cfg, fl, agents, programs, o)
		if err != nil {
			_ = fl.stop()
			return nil, err
		}
		started = true
		return &devServices{fleet: fl, stopExternal: stopExternal, creds: creds, closeConsole: closeConsole}, nil
	}

	rcfg := runner.Config{TemporalAddress: stack.Temporal.Address(), Namespace: stack.Namespace(),
		NATSURL: stack.NATS.URL(), NATS: cfg.NATS, Assets: cfg.Assets, GatewayAddress: fl.Gateway.Addr(), Logger: o.Logger, Triggers: o.Triggers,
		Tracing: o.Tracing, Metrics: orchMetrics, Endpoints: o.Endpoints, KeyDir: cfg.ModelKeyDir, MemoryStorage: o.MemoryStorage}
	if rcfg.Models, err = devModels(cfg, o.Endpoints); err != nil {
		_ = fl.stop()
		return nil, err
	}
	if cfg.JWTSecret == "" {
		// Auth off: every caller is the one principal "anonymous" (the
		// laptop's owner), so a per-principal quota would only cap the stores.
		rcfg.PrincipalMaxBytes, rcfg.PrincipalMaxRuns, rcfg.PrincipalMaxEventBytes = -1, -1, -1
	}
	if cfg.JWTSecret != "" {
		// With auth on, the orchestrator calls tools with its own token (and
		// on behalf of each run's starter), as in a cluster.
		rcfg.GatewayTokenSource = devTokenSource([]byte(cfg.JWTSecret))
	}
	orch, err := runner.Start(ctx, rcfg)
	if err != nil {
		_ = fl.stop()
		return nil, fmt.Errorf("start the orchestrator: %w", err)
	}
	agents.serve(orch, fl.Gateway)
	programs.serve(orch, fl.Gateway)
	started = true
	return &devServices{fleet: fl, orch: orch, creds: creds, closeConsole: closeConsole}, nil
}

// stop stops the orchestrator (or the services served for an external one),
// then the gateway and workers.
func (s *devServices) stop() error {
	if s.orch != nil {
		s.orch.Stop()
	}
	if s.stopExternal != nil {
		s.stopExternal()
	}
	err := s.fleet.stop()
	s.creds.Close()
	s.closeConsole()
	return err
}
