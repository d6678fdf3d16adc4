package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"connectrpc.com/connect"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/pflag"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/gen/toolfleet/v1/toolfleetv1connect"
	"github.com/toolfleet/toolfleet/orchestrator/agent"
	"github.com/toolfleet/toolfleet/orchestrator/agentapi"
	"github.com/toolfleet/toolfleet/orchestrator/ids"
	"github.com/toolfleet/toolfleet/orchestrator/program"
	"github.com/toolfleet/toolfleet/orchestrator/programapi"
	"github.com/toolfleet/toolfleet/orchestrator/runner"
	"github.com/toolfleet/toolfleet/orchestrator/runstore"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall/apibase"
	"github.com/toolfleet/toolfleet/orchestrator/trigger"
	"github.com/toolfleet/toolfleet/orchestrator/visibility"
	"github.com/toolfleet/toolfleet/sdk/natsconn"
	"github.com/toolfleet/toolfleet/services/gateway"
	"github.com/toolfleet/toolfleet/services/gateway/connections"
	mcporch "github.com/toolfleet/toolfleet/services/gateway/mcp/orchestration"
)

// OrchestrationConfig is how the gateway serves the AgentService and the
// ProgramService next to the tools: it starts, reads and steers runs and
// programs through Temporal (the orchestrator's workers run them) and reads
// their events and transcripts from NATS. The flags mirror cmd/orchestrator's,
// so one ConfigMap can hold them for both.
type OrchestrationConfig struct {
	// TemporalAddress is the Temporal frontend; empty: runs and programs are
	// not served (their calls answer FAILED_PRECONDITION naming this flag).
	TemporalAddress string
	Namespace       string
	TaskQueue       string
	TemporalTLS     runner.TemporalTLS
	// Triggers is the orchestrator's trigger file, listed by ListTriggers.
	Triggers string
	// ModelEndpoints are the orchestrator's --model-endpoint bindings
	// (agent.ParseEndpoints): StartRun refuses a model key sent to a base URL
	// it is not bound to, at once, instead of the run failing at its first
	// model call on the orchestrator.
	ModelEndpoints []string
	endpoints      *agent.Endpoints
	// HistoryContent is the orchestrator's --history-content: with "none"
	// the programs this gateway starts keep their input out of history too.
	HistoryContent string
}

func (o *OrchestrationConfig) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.TemporalAddress, "temporal-address", "", "Temporal frontend host:port; serves AgentService and ProgramService (needs --nats-url); empty: runs and programs answer FAILED_PRECONDITION")
	fs.StringVar(&o.Namespace, "namespace", "default", "Temporal namespace of runs and programs (the orchestrator's)")
	fs.StringVar(&o.TaskQueue, "task-queue", ids.TaskQueue, "Temporal task queue the orchestrator polls (the orchestrator's --task-queue)")
	fs.StringVar(&o.TemporalTLS.CAFile, "temporal-tls-ca-file", "", "PEM CAs to trust for Temporal; any --temporal-tls-* flag turns TLS on")
	fs.StringVar(&o.TemporalTLS.CertFile, "temporal-tls-cert-file", "", "client certificate for Temporal mTLS (re-read on every handshake)")
	fs.StringVar(&o.TemporalTLS.KeyFile, "temporal-tls-key-file", "", "client key for Temporal mTLS")
	fs.StringVar(&o.TemporalTLS.ServerName, "temporal-tls-server-name", "", "name expected in Temporal's certificate (default: the address's host)")
	fs.StringVar(&o.Triggers, "triggers", "", "the orchestrator's trigger file, for ListTriggers (optional)")
	fs.StringVar(&o.HistoryContent, "history-content", agent.HistoryContentPreviews, "the orchestrator's --history-content (previews or none): with none, programs started here keep their source and arguments out of Temporal history")
	fs.StringArrayVar(&o.ModelEndpoints, "model-endpoint", nil, "the orchestrator's KEYREF=URL[,URL...] bindings (several separated by ;), so StartRun refuses a key sent elsewhere at once (docs/agents.md)")
}

func (o *OrchestrationConfig) validate(natsURL string) error {
	if o.TemporalAddress == "" {
		if o.TemporalTLS.Enabled() {
			return errors.New("--temporal-tls-* are set without --temporal-address")
		}
		if len(o.ModelEndpoints) > 0 {
			return errors.New("--model-endpoint is set without --temporal-address")
		}
		return nil
	}
	var errs []error
	if err := agent.ValidHistoryContent(o.HistoryContent); err != nil {
		errs = append(errs, fmt.Errorf("--history-content: %w", err))
	}
	eps, err := agent.ParseEndpoints(o.ModelEndpoints...)
	if err != nil {
		errs = append(errs, fmt.Errorf("--model-endpoint: %w", err))
	}
	o.endpoints = eps
	if natsURL == "" {
		errs = append(errs, errors.New("--temporal-address needs --nats-url: runs and programs keep their events and transcripts in NATS"))
	}
	if o.Namespace == "" || o.TaskQueue == "" {
		errs = append(errs, errors.New("--namespace and --task-queue must not be empty"))
	}
	if err := o.TemporalTLS.Validate(); err != nil {
		errs = append(errs, err)
	}
	if o.Triggers != "" {
		if _, err := trigger.Load(o.Triggers); err != nil {
			errs = append(errs, fmt.Errorf("--triggers: %w", err))
		}
	}
	return errors.Join(errs...)
}

// The services served for the orchestrator, by their health names.
var (
	agentServiceName   = toolfleetv1.AgentService_ServiceDesc.ServiceName
	programServiceName = toolfleetv1.ProgramService_ServiceDesc.ServiceName
)

// errNotConfigured is the answer of every run and program call on a gateway
// without --temporal-address.
var errNotConfigured = errors.New("this gateway does not serve agent runs and programs: start it with --temporal-address (TOOLFLEET_TEMPORAL_ADDRESS) and --nats-url")

// orchestration serves the AgentService and the ProgramService at the
// gateway. Mount its mounts before the gateway starts; run connects (NATS,
// Temporal, the orchestrator's buckets) in the background, then sets the
// services; until then their calls are UNAVAILABLE and their grpc.health.v1
// status NOT_SERVING. It never runs a Temporal worker: the orchestrator does.
type orchestration struct {
	cfg      OrchestrationConfig
	natsURL  string
	nats     natsconn.Options
	log      *slog.Logger
	agents   agentapi.Late
	programs programapi.Late
}

func newOrchestration(cfg Config, log *slog.Logger) *orchestration {
	return &orchestration{cfg: cfg.Orchestration, natsURL: cfg.NATSURL, nats: cfg.NATS, log: log.With("component", "orchestration")}
}

// mounts are the two services, or, when Temporal is not configured, two
// that refuse every call with FAILED_PRECONDITION naming the flag.
func (o *orchestration) mounts() []gateway.Mount {
	if o.cfg.TemporalAddress == "" {
		refuse := connect.WithInterceptors(refuse{connect.NewError(connect.CodeFailedPrecondition, errNotConfigured)})
		return []gateway.Mount{
			mount(toolfleetv1connect.NewAgentServiceHandler(toolfleetv1connect.UnimplementedAgentServiceHandler{}, refuse)),
			mount(toolfleetv1connect.NewProgramServiceHandler(toolfleetv1connect.UnimplementedProgramServiceHandler{}, refuse)),
		}
	}
	return []gateway.Mount{
		{Pattern: o.agents.Pattern(), Handler: &o.agents},
		{Pattern: o.programs.Pattern(), Handler: &o.programs},
	}
}

// mcpTasks runs /mcp's tasks on the two services, called in process; when
// Temporal is not configured they are refused as the services' calls are.
// conns (nil: none) makes the links of connect items.
func (o *orchestration) mcpTasks(conns *connections.API) *mcporch.Tasks {
	if o.cfg.TemporalAddress == "" {
		refuse := connect.NewError(connect.CodeFailedPrecondition, errNotConfigured)
		return mcporch.New(mcporch.Services{
			Programs: func() (mcporch.Programs, error) { return nil, refuse },
			Agents:   func() (mcporch.Agents, error) { return nil, refuse }})
	}
	s := mcporch.Services{
		Programs: func() (mcporch.Programs, error) {
			if s := o.programs.Get(); s != nil {
				return s, nil
			}
			return nil, apibase.Starting()
		},
		Agents: func() (mcporch.Agents, error) {
			if s := o.agents.Get(); s != nil {
				return s, nil
			}
			return nil, apibase.Starting()
		}}
	if conns != nil {
		s.Connections = conns
	}
	return mcporch.New(s)
}

// setHealth sets both services' health at g.
func setHealth(g *gateway.Gateway, serving bool) {
	_ = g.SetMountHealth(agentServiceName, serving)
	_ = g.SetMountHealth(programServiceName, serving)
}

// run connects, serves the two services through g, and watches Temporal's
// health until ctx ends; then it closes its connections. Without Temporal
// configured it only reports the services NOT_SERVING.
func (o *orchestration) run(ctx context.Context, g *gateway.Gateway) error {
	setHealth(g, false)
	if o.cfg.TemporalAddress == "" {
		return nil
	}
	nc, err := o.nats.Connect(o.natsURL, "toolfleet-gateway-orchestration", nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true))
	if err != nil {
		return fmt.Errorf("connect to NATS for runs and programs: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("JetStream: %w", err)
	}
	tlsCfg, err := o.cfg.TemporalTLS.ClientConfig()
	if err != nil {
		return err
	}
	// Lazy: the gateway serves tools whether or not Temporal is up yet.
	// Program values kept out of history are read from the orchestrator's
	// blob store, bound below once it answers.
	values := &program.LateBlobs{}
	tc, err := client.NewLazyClient(client.Options{HostPort: o.cfg.TemporalAddress, Namespace: o.cfg.Namespace,
		Logger: tlog.NewStructuredLogger(o.log), ConnectionOptions: client.ConnectionOptions{TLS: tlsCfg},
		ExternalStorage: program.ExternalStorage(values, o.cfg.programs())})
	if err != nil {
		return fmt.Errorf("Temporal client for %s: %w", o.cfg.TemporalAddress, err)
	}
	defer tc.Close()
	var triggers *trigger.Config
	if o.cfg.Triggers != "" {
		if triggers, err = trigger.Load(o.cfg.Triggers); err != nil {
			return fmt.Errorf("--triggers: %w", err)
		}
	}
	auth := gatewayAuth(g)
	// Connect: the orchestrator's buckets and Temporal's namespace, retried
	// until both answer (start-up order does not matter).
	delay := 200 * time.Millisecond
	for attempt := 1; ; attempt++ {
		store, err := o.connect(ctx, js, tc)
		if err == nil {
			values.Set(store)
			seen := &visibility.Checker{Client: tc, Namespace: o.cfg.Namespace}
			runs := &agent.Runs{Temporal: tc, Store: store, TaskQueue: o.cfg.TaskQueue, Visibility: seen}
			o.agents.Set(&agentapi.Service{Runs: runs, JS: js, NC: nc, Auth: auth, Log: o.log,
				Endpoints: o.cfg.endpoints, CheckEndpoints: true})
			o.programs.Set(&programapi.Service{Programs: &program.Programs{Temporal: tc, TaskQueue: o.cfg.TaskQueue, Visibility: seen, Config: o.cfg.programs(),
				Quota: store},
				Events: js, Auth: auth, Triggers: triggers.Proto})
			setHealth(g, true)
			o.log.Info("serving agent runs and programs", "temporal", o.cfg.TemporalAddress, "namespace", o.cfg.Namespace, "task_queue", o.cfg.TaskQueue)
			break
		}
		if attempt == 1 || attempt%30 == 0 {
			o.log.Warn("runs and programs not served yet: waiting for NATS, the orchestrator's buckets and Temporal", "error", err)
		}
		if !sleep(ctx, delay) {
			return nil
		}
		delay = min(2*delay, 5*time.Second)
	}
	// Then keep the services' health true to what their calls would meet.
	serving := true
	for sleep(ctx, 10*time.Second) {
		err := describe(ctx, tc, o.cfg.Namespace)
		if ok := err == nil && nc.IsConnected(); ok != serving {
			serving = ok
			setHealth(g, ok)
			o.log.Warn("runs and programs serving changed", "serving", ok, "error", err)
		}
	}
	return nil
}

// connect checks Temporal's namespace and binds the orchestrator's buckets.
func (o *orchestration) connect(ctx context.Context, js jetstream.JetStream, tc client.Client) (*runstore.Store, error) {
	if err := describe(ctx, tc, o.cfg.Namespace); err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := js.Stream(cctx, toolcall.DefaultEventStream); err != nil {
		return nil, fmt.Errorf("the run event stream %s (the orchestrator creates it): %w", toolcall.DefaultEventStream, err)
	}
	return runstore.BindStore(cctx, js, runstore.StoreConfig{})
}

// describe asks Temporal for the namespace, within 5 s.
func describe(ctx context.Context, tc client.Client, namespace string) error {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := tc.WorkflowService().DescribeNamespace(cctx, &workflowservice.DescribeNamespaceRequest{Namespace: namespace}); err != nil {
		return fmt.Errorf("the Temporal namespace %q: %w", namespace, err)
	}
	return nil
}

// sleep waits d, or less when ctx ends (then false).
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// gatewayAuth authenticates a request's Authorization header with the gateway.
func gatewayAuth(g *gateway.Gateway) agentapi.Authenticator {
	return func(ctx context.Context, h http.Header) (agentapi.Caller, error) {
		p, err := g.Authenticate(ctx, h.Get("Authorization"))
		if err != nil {
			return agentapi.Caller{}, err
		}
		return agentapi.Caller{Subject: p.Subject, Scopes: p.Scopes, Anonymous: p.Anonymous}, nil
	}
}

// mount is a gateway mount of a Connect handler (which serves every
// protocol, gRPC included).
func mount(pattern string, h http.Handler) gateway.Mount {
	return gateway.Mount{Pattern: pattern, Handler: h}
}

// refuse is a Connect interceptor that answers every call with err.
type refuse struct{ err error }

func (r refuse) WrapUnary(connect.UnaryFunc) connect.UnaryFunc {
	return func(context.Context, connect.AnyRequest) (connect.AnyResponse, error) { return nil, r.err }
}

func (r refuse) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (r refuse) WrapStreamingHandler(connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(context.Context, connect.StreamingHandlerConn) error { return r.err }
}

// programs is the configuration of the programs this gateway starts: the
// orchestrator's history setting, so a program's input follows it.
func (o *OrchestrationConfig) programs() program.Config {
	return program.Config{NoContentInHistory: o.HistoryContent == agent.HistoryContentNone}
}
