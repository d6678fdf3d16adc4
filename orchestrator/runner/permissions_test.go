package runner_test

import (
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/e2e"
	"github.com/toolfleet/toolfleet/internal/devstack/devstacktest"
	"github.com/toolfleet/toolfleet/internal/natsx"
	"github.com/toolfleet/toolfleet/orchestrator/agent"
	"github.com/toolfleet/toolfleet/orchestrator/agent/agenttest"
	"github.com/toolfleet/toolfleet/orchestrator/runner"
	"github.com/toolfleet/toolfleet/orchestrator/runstore"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall"
	"github.com/toolfleet/toolfleet/orchestrator/trigger"
	"github.com/toolfleet/toolfleet/sdk/jsassets"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/llmtest"
	"github.com/toolfleet/toolfleet/sdk/natsconn"
)

// The least NATS permissions of an orchestrator with the default names (run
// events, token deltas, the transcript, blob and run records buckets, the
// reaper's consumer, the trigger streams and their consumers).
// docs/operations.md lists the same; keep them in step.
var (
	orchestratorPublish = []string{
		"toolfleet.events.run.>", // run events
		"toolfleet.stream.run.>", // token deltas (core NATS)
		"$JS.API.INFO",
		"$JS.API.STREAM.INFO.TOOLFLEET_RUN_EVENTS",
		"$JS.API.STREAM.CREATE.TOOLFLEET_RUN_EVENTS",
		"$JS.API.STREAM.UPDATE.TOOLFLEET_RUN_EVENTS",
		"$JS.API.STREAM.PURGE.TOOLFLEET_RUN_EVENTS", // a freed run's events
		"$KV.toolfleet_transcripts.>",
		"$JS.API.STREAM.INFO.KV_toolfleet_transcripts",
		"$JS.API.STREAM.CREATE.KV_toolfleet_transcripts",
		"$JS.API.STREAM.UPDATE.KV_toolfleet_transcripts",
		"$JS.API.STREAM.PURGE.KV_toolfleet_transcripts", // a freed run's messages
		"$JS.API.DIRECT.GET.KV_toolfleet_transcripts.>",
		"$JS.API.CONSUMER.CREATE.KV_toolfleet_transcripts.>", // loading a transcript, listing a run's blobs
		"$JS.API.CONSUMER.DELETE.KV_toolfleet_transcripts.>",
		"$JS.FC.KV_toolfleet_transcripts.>",
		"$O.toolfleet_run_blobs.>",
		"$JS.API.STREAM.INFO.OBJ_toolfleet_run_blobs",
		"$JS.API.STREAM.CREATE.OBJ_toolfleet_run_blobs",
		"$JS.API.STREAM.UPDATE.OBJ_toolfleet_run_blobs",
		"$JS.API.STREAM.PURGE.OBJ_toolfleet_run_blobs", // a freed run's blobs
		"$JS.API.DIRECT.GET.OBJ_toolfleet_run_blobs.>",
		"$JS.API.CONSUMER.CREATE.OBJ_toolfleet_run_blobs.>",
		"$JS.API.CONSUMER.DELETE.OBJ_toolfleet_run_blobs.>",
		"$JS.FC.OBJ_toolfleet_run_blobs.>",
		"$KV.toolfleet_runs.>",
		"$JS.API.STREAM.INFO.KV_toolfleet_runs",
		"$JS.API.STREAM.CREATE.KV_toolfleet_runs",
		"$JS.API.STREAM.UPDATE.KV_toolfleet_runs",
		"$JS.API.DIRECT.GET.KV_toolfleet_runs.>",
		"$JS.API.CONSUMER.CREATE.KV_toolfleet_runs.toolfleet_reaper.>", // the reaper's durable consumer
		"$JS.API.CONSUMER.INFO.KV_toolfleet_runs.toolfleet_reaper",
		"$JS.API.CONSUMER.MSG.NEXT.KV_toolfleet_runs.toolfleet_reaper",
		"$JS.ACK.KV_toolfleet_runs.toolfleet_reaper.>",
		// With --triggers:
		"$JS.API.STREAM.INFO.TOOLFLEET_TRIGGERS",
		"$JS.API.STREAM.CREATE.TOOLFLEET_TRIGGERS",
		"$JS.API.STREAM.UPDATE.TOOLFLEET_TRIGGERS",
		"$JS.API.STREAM.INFO.TOOLFLEET_TRIGGERS_DEAD",
		"$JS.API.STREAM.CREATE.TOOLFLEET_TRIGGERS_DEAD",
		"$JS.API.STREAM.UPDATE.TOOLFLEET_TRIGGERS_DEAD",
		"toolfleet.deadletter.triggers",
		"$JS.API.CONSUMER.CREATE.TOOLFLEET_TRIGGERS.>",
		"$JS.API.CONSUMER.INFO.TOOLFLEET_TRIGGERS.>",
		"$JS.API.CONSUMER.MSG.NEXT.TOOLFLEET_TRIGGERS.>",
		"$JS.ACK.TOOLFLEET_TRIGGERS.>",
	}
	orchestratorSubscribe = []string{"_INBOX.>"}
	// A tenant that publishes its own trigger messages, and nothing else.
	tenantPublish   = []string{"toolfleet.triggers.tenant.>"}
	tenantSubscribe = []string{"_INBOX.>"}
)

func permissions(pub, sub []string) *server.Permissions {
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: pub},
		Subscribe: &server.SubjectPermission{Allow: sub},
	}
}

// lockedBuffer collects the NATS server's logs.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestLeastNATSPermissions: an orchestrator with only the permissions
// docs/operations.md lists creates its assets, runs an agent run with a tool
// call and a trigger-started run, streams deltas, publishes events, stores
// transcripts and blobs, counts the quota and frees a closed run after the
// retention, without one permission violation. A tenant's NATS user with its
// own trigger subjects only cannot read another run's deltas, events,
// transcript or blobs, nor publish on another trigger subject.
func TestLeastNATSPermissions(t *testing.T) {
	t.Parallel()
	serverLogs := &lockedBuffer{}
	srv, err := natsx.StartEmbedded(t.Context(), natsx.EmbeddedConfig{StoreDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(serverLogs, nil)),
		Configure: func(o *server.Options) {
			o.Users = []*server.User{
				{Username: "orchestrator", Password: "o", Permissions: permissions(orchestratorPublish, orchestratorSubscribe)},
				{Username: "tenant", Password: "t", Permissions: permissions(tenantPublish, tenantSubscribe)},
				{Username: "admin", Password: "a"},
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	violations := func(user string) []string {
		var out []string
		for line := range strings.SplitSeq(serverLogs.String(), "\n") {
			// The server writes User "name" (escaped by the text handler).
			if strings.Contains(line, "Violation") && (strings.Contains(line, user+`\"`) || strings.Contains(line, user+`"`)) {
				out = append(out, line)
			}
		}
		return out
	}
	t.Cleanup(func() {
		for _, line := range violations("orchestrator") {
			t.Errorf("NATS refused the orchestrator: %s", line)
		}
	})

	stack := devstacktest.Start(t) // Temporal (its own NATS is not used)
	fleet := e2e.Start(t, e2e.Options{})
	models := agent.NewResolver()
	models.Register("perm", &agenttest.ByTurn{Turns: []llmtest.ScriptTurn{
		llmtest.CallTools("multiplying", llm.CallPart("m", "Calculator_Multiply", map[string]any{"a": 6, "b": 7})),
		llmtest.SayText("forty-two"), llmtest.SayText("again")}})
	models.Register("trig", &agenttest.ByTurn{Turns: []llmtest.ScriptTurn{llmtest.SayText("triggered")}})
	triggers := &trigger.Config{Triggers: []trigger.Trigger{{Name: "orders", Subject: "toolfleet.triggers.tenant.orders",
		RunAs: toolcall.Principal{Subject: "tenant", Scopes: []string{"tools:call"}}, Agent: &trigger.AgentTarget{Model: "scripted:trig"}}}}
	o, err := runner.Start(t.Context(), runner.Config{TemporalAddress: stack.Temporal.Address(), Namespace: stack.Namespace(),
		TaskQueue: "permissions-test", NATSURL: srv.URL(), NATS: natsconn.Options{User: "orchestrator", Password: "o"},
		GatewayAddress: fleet.Addr, Models: models, Triggers: triggers,
		Assets: jsassets.Config{Profile: jsassets.ProfileDev, Overrides: "toolfleet_runs.max-age=2s"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(o.Stop)
	ctx := t.Context()

	admin, err := natsconn.Options{User: "admin", Password: "a"}.Connect(srv.URL(), "admin")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	deltas, err := admin.SubscribeSync(toolcall.DeltaSubjectPrefix + ">")
	if err != nil {
		t.Fatal(err)
	}

	// A run with a tool call, answered, then continued once.
	p := toolcall.Principal{Subject: "alice", Scopes: []string{"tools:call", "calculator:use"}}
	spec := agent.RunSpec{Model: agent.ModelSpec{Spec: llm.Spec{Provider: "scripted", Name: "perm"}}, Tools: []string{"Calculator.Multiply"},
		IdleTimeout: -time.Second}
	if _, err := o.Runs.Start(ctx, "perm-run", spec, p, llm.User("6*7?")); err != nil {
		t.Fatal(err)
	}
	waitRun := func(id string, turns int) agent.RunState {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
			st, err := o.Runs.Get(ctx, id)
			if err == nil && st.Status == agent.StatusCompleted && st.Turn >= turns {
				return st
			}
			if time.Now().After(deadline) {
				t.Fatalf("run %s: %+v %v", id, st, err)
			}
		}
	}
	if st := waitRun("perm-run", 2); st.Answer != "forty-two" || st.ToolCalls != 1 {
		t.Fatalf("the run: %+v", st)
	}
	if _, err := deltas.NextMsg(10 * time.Second); err != nil {
		t.Errorf("no token delta: %v", err)
	}
	js, err := jetstream.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	events, err := js.Stream(ctx, toolcall.DefaultEventStream)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := events.Info(ctx); err != nil || info.State.Msgs < 4 {
		t.Fatalf("run events: %v %v", info, err)
	}

	// A tenant publishes on its own trigger subject: a run starts as it.
	tenant, err := natsconn.Options{User: "tenant", Password: "t"}.Connect(srv.URL(), "tenant")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tenant.Close)
	tjs, err := jetstream.New(tenant)
	if err != nil {
		t.Fatal(err)
	}
	if err := tenant.Publish("toolfleet.triggers.tenant.orders", []byte(`{"text":"new order"}`)); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		info, err := events.Info(ctx, jetstream.WithSubjectFilter(toolcall.EventSubjectPrefix+"*.completed"))
		done := false
		if err == nil {
			for subj := range info.State.Subjects {
				done = done || strings.HasPrefix(subj, toolcall.EventSubjectPrefix+"trg_orders")
			}
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the trigger's run did not complete: %v", err)
		}
	}

	// The closed run is freed after the 2 s retention (reaper: consumer,
	// Temporal check, purges, quota release).
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		_, err := o.Runs.Principal(ctx, "perm-run")
		if errors.Is(err, agent.ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the closed run was not freed: %v", err)
		}
	}

	// The tenant can read nothing of other runs.
	refusals := map[string]func() error{
		"read the transcript bucket": func() error {
			kv, err := tjs.KeyValue(ctx, runstore.DefaultTranscriptBucket)
			if err != nil {
				return err
			}
			_, err = kv.Get(ctx, "perm-run.meta")
			return err
		},
		"read the blob bucket": func() error {
			_, err := tjs.ObjectStore(ctx, runstore.DefaultBlobBucket)
			return err
		},
		"consume the run event stream": func() error {
			_, err := tjs.OrderedConsumer(ctx, toolcall.DefaultEventStream, jetstream.OrderedConsumerConfig{})
			return err
		},
	}
	for name, f := range refusals {
		if err := f(); err == nil {
			t.Errorf("the tenant could %s", name)
		}
	}
	// Core subscriptions are refused asynchronously: the server logs them
	// (and no message reaches them).
	for _, subj := range []string{toolcall.DeltaSubjectPrefix + ">", toolcall.EventSubjectPrefix + ">"} {
		if _, err := tenant.SubscribeSync(subj); err != nil {
			t.Fatal(err)
		}
	}
	_ = tenant.Flush()
	// Publishing on another trigger subject is refused.
	if err := tenant.Publish("toolfleet.triggers.admin.purge", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	_ = tenant.Flush()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		logs := strings.Join(violations("tenant"), "\n")
		ok := strings.Contains(logs, "toolfleet.triggers.admin.purge") && strings.Contains(logs, toolcall.DeltaSubjectPrefix+">") &&
			strings.Contains(logs, toolcall.EventSubjectPrefix+">")
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("NATS did not refuse the tenant's publish and subscriptions; violations logged:\n%s", logs)
		}
	}
}
