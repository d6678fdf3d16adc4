package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"

	"github.com/toolfleet/toolfleet/internal/devstack"
	"github.com/toolfleet/toolfleet/orchestrator/agent"
	"github.com/toolfleet/toolfleet/orchestrator/agentapi"
	"github.com/toolfleet/toolfleet/orchestrator/ids"
	"github.com/toolfleet/toolfleet/orchestrator/program"
	"github.com/toolfleet/toolfleet/orchestrator/programapi"
	"github.com/toolfleet/toolfleet/orchestrator/runstore"
	"github.com/toolfleet/toolfleet/sdk/natsconn"
)

// serveExternal serves the AgentService and the ProgramService of a `toolfleet
// dev --no-orchestrator` through Temporal, as cmd/gateway does with
// --temporal-address: runs and programs are started here and run by an
// orchestrator started separately (cmd/orchestrator) on the stack. The
// services are set once that orchestrator has made its buckets; until then
// their calls are Unavailable. It returns at once; stop ends it and closes
// its connections.
func serveExternal(stack *devstack.Stack, cfg devConfig, fl *fleet, agents *agentMount, programs *programMount, o devServiceOptions) (stop func(), err error) {
	log := o.Logger.With("component", "orchestration")
	nc, err := cfg.NATS.Connect(stack.NATS.URL(), "toolfleet-dev-orchestration", nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true))
	if err != nil {
		return nil, fmt.Errorf("connect to NATS for runs and programs: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	values := &program.LateBlobs{}
	tc, err := client.NewLazyClient(client.Options{HostPort: stack.Temporal.Address(), Namespace: stack.Namespace(),
		Logger: tlog.NewStructuredLogger(log), ExternalStorage: program.ExternalStorage(values, program.Config{})})
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("Temporal client: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		auth := gatewayAuth(fl.Gateway)
		for attempt := 1; ; attempt++ {
			cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
			store, err := runstore.BindStore(cctx, js, runstore.StoreConfig{})
			ccancel()
			if err == nil {
				values.Set(store)
				agents.late.Set(&agentapi.Service{Runs: &agent.Runs{Temporal: tc, Store: store, TaskQueue: ids.TaskQueue},
					JS: js, NC: nc, Auth: auth, Log: log, Endpoints: o.Endpoints, CheckEndpoints: true})
				programs.late.Set(&programapi.Service{Programs: &program.Programs{Temporal: tc, TaskQueue: ids.TaskQueue, Quota: store}, Events: js, Auth: auth})
				log.Info("serving agent runs and programs for an external orchestrator", "task_queue", ids.TaskQueue)
				return
			}
			if attempt == 1 || attempt%60 == 0 {
				log.Info("runs and programs not served yet: waiting for an orchestrator to make its buckets", "error", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	return func() {
		cancel()
		<-done
		tc.Close()
		nc.Close()
	}, nil
}

// externalOrchestratorCommand is the cmd/orchestrator command line that serves
// a `toolfleet dev --no-orchestrator`.
func externalOrchestratorCommand(stack *devstack.Stack, cfg devConfig, gatewayAddr string) string {
	args := []string{"go run ./cmd/orchestrator", "--temporal-address", stack.Temporal.Address(), "--namespace", stack.Namespace(),
		"--nats-url", stack.NATS.URL(), "--gateway-address", gatewayAddr, "--js-profile", "dev"}
	if cfg.ScriptDir != "" {
		args = append(args, "--script-dir", cfg.ScriptDir)
	}
	if cfg.JWTSecret == "" {
		// As dev's own orchestrator with auth off: one principal, no quota.
		args = append(args, "--principal-max-bytes", "none", "--principal-max-runs", "0")
	} else {
		args = append(args, "--gateway-token", "<a token with tools:call tools:delegate tools:approve>")
	}
	if cfg.NATS != (natsconn.Options{}) {
		args = append(args, "<the --nats-* credential flags>")
	}
	return strings.Join(args, " ")
}
