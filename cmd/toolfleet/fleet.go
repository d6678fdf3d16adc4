package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	calculatorv1 "github.com/toolfleet/toolfleet/gen/tools/calculator/v1"
	clockv1 "github.com/toolfleet/toolfleet/gen/tools/clock/v1"
	conformancev1 "github.com/toolfleet/toolfleet/gen/tools/conformance/v1"
	jsonqv1 "github.com/toolfleet/toolfleet/gen/tools/jsonq/v1"
	kvv1 "github.com/toolfleet/toolfleet/gen/tools/kv/v1"
	webv1 "github.com/toolfleet/toolfleet/gen/tools/web/v1"
	"github.com/toolfleet/toolfleet/sdk/jsassets"
	"github.com/toolfleet/toolfleet/sdk/natsconn"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/services/gateway"
	"github.com/toolfleet/toolfleet/services/gateway/mcp"
	"github.com/toolfleet/toolfleet/services/gateway/ratelimit"
	"github.com/toolfleet/toolfleet/workers/calculator/calculator"
	"github.com/toolfleet/toolfleet/workers/clock/clock"
	"github.com/toolfleet/toolfleet/workers/conformance/conformance"
	"github.com/toolfleet/toolfleet/workers/jsonq/jsonq"
	"github.com/toolfleet/toolfleet/workers/kv/kv"
	"github.com/toolfleet/toolfleet/workers/web/web"
)

// fleetConfig configures the gateway and bundled workers that `toolfleet dev` runs.
type fleetConfig struct {
	Host        string
	GatewayPort int
	// JWTSecret turns on HS256 bearer auth; empty = auth off (loopback only).
	JWTSecret string
	// IdP adds an identity provider's tokens (JWKS) beside JWTSecret's.
	IdP devOIDC
	// AllowedOrigins are browser origins trusted by the gateway (gateway.Config).
	AllowedOrigins []string
	NATSURL        string
	// NATS holds the credentials and TLS settings for NATSURL.
	NATS natsconn.Options
	// Assets sizes the JetStream assets of the gateway and the KV worker.
	Assets jsassets.Config
	Logger *slog.Logger
	// Mounts are services served at the gateway's address (the AgentService).
	Mounts []gateway.Mount
	// MCPTasks runs /mcp's tasks (gateway.Config.MCPTasks); nil: none.
	MCPTasks mcp.Tasks
	// Tracing records the gateway's spans (internal/telemetry.Setup said so).
	Tracing bool
	// Conformance also runs the Conformance toolkit (the MCP conformance
	// suite's fixture tools, workers/conformance).
	Conformance bool
	// Limits are the gateway's rate limits and quotas (shared through NATS).
	Limits ratelimit.Config
	// StoreShare is the gateway's --store-share (gateway.ParseStoreShare;
	// checked by the caller).
	StoreShare string
	// Connections gives tools acting with their caller's account its tokens
	// (gateway.Config.Connections; package delegation); nil: none.
	Connections gateway.TokenSource
	// Exchange exchanges tokens for tools of first-party APIs (nil: none).
	Exchange gateway.Exchanger
}

// fleet is the running gateway and bundled workers.
type fleet struct {
	Gateway  *gateway.Gateway
	Workers  []string // names, in start order
	Toolkits []string

	cancel context.CancelFunc
	wg     sync.WaitGroup
	nc     *nats.Conn
	errs   chan error
}

// bundledWorker registers one bundled toolkit on a worker.
type bundledWorker struct {
	name, toolkit string
	register      func(ctx context.Context, w *tool.Worker, js jetstream.JetStream) error
}

var bundled = []bundledWorker{
	{"calculator", "Calculator", func(_ context.Context, w *tool.Worker, _ jetstream.JetStream) error {
		calculatorv1.RegisterCalculatorServiceServer(w, calculator.New())
		return nil
	}},
	{"clock", "Clock", func(_ context.Context, w *tool.Worker, _ jetstream.JetStream) error {
		clockv1.RegisterClockServiceServer(w, clock.New())
		return nil
	}},
	{"jsonq", "JSONQuery", func(_ context.Context, w *tool.Worker, _ jetstream.JetStream) error {
		jsonqv1.RegisterJSONQueryServiceServer(w, jsonq.New(jsonq.Config{}))
		return nil
	}},
	{"kv", "KV", func(ctx context.Context, w *tool.Worker, js jetstream.JetStream) error {
		bucket, err := kv.OpenBucket(ctx, js, kv.BucketConfig{Assets: w.Assets()})
		if err != nil {
			return err
		}
		kvv1.RegisterKVServiceServer(w, kv.New(bucket))
		return nil
	}},
	{"web", "Web", func(_ context.Context, w *tool.Worker, _ jetstream.JetStream) error {
		svc := web.New(web.Config{})
		w.OnStop(svc.Close)
		webv1.RegisterWebServiceServer(w, svc)
		return nil
	}},
}

// conformanceWorker serves the MCP conformance suite's fixture tools (dev --conformance).
var conformanceWorker = bundledWorker{"conformance", "Conformance", func(_ context.Context, w *tool.Worker, _ jetstream.JetStream) error {
	conformancev1.RegisterConformanceServiceServer(w, conformance.New())
	return nil
}}

// devWarmUp is the dev gateway's registry warm-up (gateway.Config.WarmUp).
const devWarmUp = 300 * time.Millisecond

// startFleet starts every bundled worker on a free loopback port, announcing on
// NATS, and the gateway, which finds them through those announcements.
func startFleet(ctx context.Context, cfg fleetConfig) (_ *fleet, err error) {
	nc, err := cfg.NATS.Connect(cfg.NATSURL, "toolfleet-dev", nats.MaxReconnects(-1))
	if err != nil {
		return nil, fmt.Errorf("connect to NATS: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("JetStream: %w", err)
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	workers := bundled
	if cfg.Conformance {
		workers = append(slices.Clip(bundled), conformanceWorker)
	}
	f := &fleet{cancel: cancel, nc: nc, errs: make(chan error, len(workers)+1)}
	defer func() {
		if err != nil {
			f.stop()
		}
	}()
	quiet := cfg.Logger
	for _, b := range workers {
		w, err := tool.NewWorker(tool.Config{Name: b.name, Listen: net.JoinHostPort(cfg.Host, "0"), NATSURL: cfg.NATSURL,
			NATS: cfg.NATS, Assets: cfg.Assets, Logger: quiet.With("worker", b.name)})
		if err != nil {
			return nil, fmt.Errorf("worker %s: %w", b.name, err)
		}
		if err := b.register(ctx, w, js); err != nil {
			return nil, fmt.Errorf("worker %s: %w", b.name, err)
		}
		f.run(runCtx, "worker "+b.name, w.Run)
		if err := waitReady(ctx, w.Ready(), f.errs); err != nil {
			return nil, fmt.Errorf("worker %s: %w", b.name, err)
		}
		f.Workers = append(f.Workers, b.name)
		f.Toolkits = append(f.Toolkits, b.toolkit)
	}
	auth := gateway.AuthConfig{Disabled: cfg.JWTSecret == ""}
	if cfg.JWTSecret != "" {
		auth.HS256Secret = []byte(cfg.JWTSecret)
		cfg.IdP.apply(&auth)
	}
	share, err := gateway.ParseStoreShare(cfg.StoreShare)
	if err != nil {
		return nil, fmt.Errorf("--store-share: %w", err)
	}
	g, err := gateway.New(ctx, gateway.Config{
		Listen:  net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.GatewayPort)),
		NATSURL: cfg.NATSURL,
		NATS:    cfg.NATS,
		Assets:  cfg.Assets,
		Auth:    auth,
		Logger:  cfg.Logger,
		// Browser safety: cross-origin requests are refused unless trusted here.
		AllowedOrigins: cfg.AllowedOrigins,
		Mounts:         cfg.Mounts,
		MCPTasks:       cfg.MCPTasks,
		Tracing:        cfg.Tracing,
		Limits:         cfg.Limits,
		Shares:         gateway.SharesConfig{Fraction: share},
		Connections:    cfg.Connections,
		Exchange:       cfg.Exchange,
		// The bundled workers run in this process and announce before the
		// gateway starts: they answer its probe within milliseconds, so a
		// short warm-up keeps dev's start (which waits for readiness) fast.
		WarmUp: devWarmUp,
		// `toolfleet add tool` under --worker: the rebuild joins beside the
		// running worker, with no gap (a dev fleet has one author).
		AcceptAdditiveContracts: true,
	})
	if err != nil {
		return nil, err
	}
	f.run(runCtx, "gateway", g.Run)
	if err := waitReady(ctx, g.Ready(), f.errs); err != nil {
		return nil, prefixed("gateway", err)
	}
	// Listening is not ready: wait until its JetStream assets exist, so
	// that an asset NATS refuses stops dev here with the reason.
	if err := waitServing(ctx, g, f.errs); err != nil {
		return nil, prefixed("gateway", err)
	}
	f.Gateway = g
	return f, nil
}

func (f *fleet) run(ctx context.Context, what string, run func(context.Context) error) {
	f.wg.Go(func() {
		if err := run(ctx); err != nil {
			f.errs <- prefixed(what, err)
		}
	})
}

// prefixed is err said as what's: one "what: " prefix, not one per layer
// that passed it on ("gateway: gateway: gateway: listen").
func prefixed(what string, err error) error {
	if strings.HasPrefix(err.Error(), what+": ") {
		return err
	}
	return fmt.Errorf("%s: %w", what, err)
}

// waitReady waits for ready, a start failure, or ctx.
func waitReady(ctx context.Context, ready <-chan struct{}, errs <-chan error) error {
	select {
	case <-ready:
		return nil
	case err := <-errs:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// waitServing waits until g reports SERVING (its idempotency bucket and event
// stream exist, its registry is warm), g stops with an error, or ctx ends.
func waitServing(ctx context.Context, g *gateway.Gateway, errs <-chan error) error {
	t := time.NewTicker(25 * time.Millisecond)
	defer t.Stop()
	for !g.Serving() {
		if err := g.SetupError(); errors.Is(err, jsassets.ErrInsufficientStorage) {
			return err
		}
		select {
		case err := <-errs:
			return err
		case <-ctx.Done():
			return fmt.Errorf("its JetStream assets are not ready (see the log): %w", ctx.Err())
		case <-t.C:
		}
	}
	return nil
}

// waitToolkits waits until the gateway serves every given toolkit.
func (f *fleet) waitToolkits(ctx context.Context, toolkits ...string) error {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		missing := ""
		for _, tk := range toolkits {
			if resp, err := f.Gateway.ListTools(&toolfleetv1.ListToolsRequest{Toolkit: tk}); err != nil || len(resp.GetTools()) == 0 {
				missing = tk
				break
			}
		}
		if missing == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the gateway has not found %s yet: %w", missing, ctx.Err())
		case <-t.C:
		}
	}
}

// stop stops the gateway and the workers and waits for them.
func (f *fleet) stop() error {
	f.cancel()
	f.wg.Wait()
	f.nc.Close()
	close(f.errs)
	var errs []error
	for err := range f.errs {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// printFleet prints where the gateway listens and how to call it; natsURL,
// when set, adds a `nats sub` of the call events.
func printFleet(w io.Writer, f *fleet, authOn bool, natsURL string) {
	addr := f.Gateway.Addr()
	auth := "auth OFF (loopback only)"
	bearer := ""
	if authOn {
		auth = "HS256 bearer tokens required"
		bearer = ` -H "authorization: Bearer $TOOLFLEET_TOKEN"`
	}
	fmt.Fprintf(w, "  Gateway      %s   (gRPC, Connect, gRPC-Web, OXP HTTP, /metrics; %s)\n", addr, auth)
	fmt.Fprintf(w, "  Workers      %v   (found through NATS announcements)\n", f.Workers)
	fmt.Fprintln(w, "Try:")
	if authOn {
		// The CLI reads TOOLFLEET_TOKEN too, so every hint below works once it is set.
		fmt.Fprintln(w, "  export TOOLFLEET_TOKEN=…   # an HS256 JWT signed with the gateway's secret, e.g. scope \"tools:call runs:start runs:read\" (docs/operations.md)")
	}
	fmt.Fprintf(w, "  grpcurl -plaintext%s -d '{\"tool_id\": \"Calculator.Add\", \"input\": {\"a\": 2, \"b\": 3}}' %s toolfleet.v1.ToolGatewayService/CallTool\n", bearer, addr)
	fmt.Fprintf(w, "  curl -s%s -H 'Content-Type: application/json' http://%s/tools/call -d '{\"request\": {\"tool_id\": \"Calculator.Add\", \"input\": {\"a\": 2, \"b\": 3}}}'\n", bearer, addr)
	if natsURL != "" {
		fmt.Fprintf(w, "  nats --server %s sub 'toolfleet.events.>'\n", natsURL)
	}
}
