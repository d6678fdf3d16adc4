package agent_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/worker"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/toolfleet/toolfleet/e2e"
	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	kvv1 "github.com/toolfleet/toolfleet/gen/tools/kv/v1"
	"github.com/toolfleet/toolfleet/internal/devstack"
	"github.com/toolfleet/toolfleet/internal/devstack/devstacktest"
	"github.com/toolfleet/toolfleet/orchestrator/agent"
	"github.com/toolfleet/toolfleet/orchestrator/agent/agenttest"
	"github.com/toolfleet/toolfleet/orchestrator/runstore"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall"
	"github.com/toolfleet/toolfleet/sdk/client"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/llmtest"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/workers/kv/kv"
)

// env is one embedded stack (NATS + Temporal), a real gateway with the
// calculator, SchemaTest and KV workers, and an orchestrator worker, shared
// by the subtests of one test.
type env struct {
	stack  *devstack.Stack
	fleet  *e2e.Fleet
	js     jetstream.JetStream
	kv     *countingKV
	store  *runstore.Store
	runs   *agent.Runs
	models *agent.Resolver
	queue  string
}

// countingKV is the bundled KV tool with a side-effect counter per key.
type countingKV struct {
	*kv.Service
	mu      sync.Mutex
	puts    map[string]int
	deletes map[string]int
}

func (c *countingKV) Put(ctx context.Context, req *kvv1.PutRequest) (*kvv1.PutResponse, error) {
	c.mu.Lock()
	c.puts[req.GetKey()]++
	c.mu.Unlock()
	return c.Service.Put(ctx, req)
}

func (c *countingKV) Delete(ctx context.Context, req *kvv1.DeleteRequest) (*kvv1.DeleteResponse, error) {
	c.mu.Lock()
	c.deletes[req.GetKey()]++
	c.mu.Unlock()
	return c.Service.Delete(ctx, req)
}

func (c *countingKV) counts(key string) (puts, deletes int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.puts[key], c.deletes[key]
}

func newEnv(t *testing.T) *env {
	t.Helper()
	stack := devstacktest.Start(t)
	e := &env{stack: stack, queue: "agent-test-" + strings.ReplaceAll(t.Name(), "/", "-")}
	e.fleet = e2e.Start(t, e2e.Options{NATSURL: stack.NATS.URL()})
	nc, err := nats.Connect(stack.NATS.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if e.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	bucket, err := kv.OpenBucket(ctx, e.js, kv.BucketConfig{})
	if err != nil {
		t.Fatal(err)
	}
	e.kv = &countingKV{Service: kv.New(bucket), puts: map[string]int{}, deletes: map[string]int{}}
	e.fleet.AddWorker(t, func(w *tool.Worker) { kvv1.RegisterKVServiceServer(w, e.kv) })
	e.fleet.WaitTool(t, "KV.Delete")

	if e.store, err = runstore.OpenStore(ctx, e.js, runstore.StoreConfig{Memory: true}); err != nil {
		t.Fatal(err)
	}
	events, err := agent.OpenEvents(ctx, nc, e.js, agent.EventStreamConfig("", true))
	if err != nil {
		t.Fatal(err)
	}
	gw, err := client.New(e.fleet.Addr, client.WithRetry(client.RetryPolicy{MaxAttempts: 1}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gw.Close() })
	e.models = agent.NewResolver()
	tc := devstacktest.Client(t, stack)
	w := worker.New(tc, e.queue, worker.Options{})
	agent.Register(w, &agent.Activities{Store: e.store, Events: events, Gateway: gw, Models: e.models})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	e.runs = &agent.Runs{Temporal: tc, Store: e.store, TaskQueue: e.queue}
	return e
}

// start registers turns as model "scripted:<run id>" and starts the run.
func (e *env) start(t *testing.T, runID string, spec agent.RunSpec, turns ...llmtest.ScriptTurn) {
	t.Helper()
	e.models.Register(runID, &agenttest.ByTurn{Turns: turns})
	spec.Model = agent.ModelSpec{Spec: llm.Spec{Provider: "scripted", Name: runID}}
	if _, err := e.runs.Start(t.Context(), runID, spec, toolcall.Principal{Subject: "ana", Scopes: []string{"tools:call", "schematest:read"}},
		llm.System("You are a test."), llm.User("go")); err != nil {
		t.Fatalf("start %s: %v", runID, err)
	}
}

// waitEvent reads the run's events from the start until one of kinds has
// been seen n times (n=1 by default), and returns it.
func (e *env) waitEvent(t *testing.T, runID string, n int, kinds ...string) *toolfleetv1.RunEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	cons, err := e.js.OrderedConsumer(ctx, toolcall.DefaultEventStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{toolcall.EventSubject(runID, ">")}})
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for {
		msg, err := cons.Next(jetstream.FetchContext(ctx))
		if err != nil {
			t.Fatalf("run %s: waiting for %v: %v", runID, kinds, err)
		}
		ev, err := toolcall.DecodeEvent(msg.Data())
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(kinds, ev.GetKind()) {
			if seen++; seen >= max(n, 1) {
				return ev
			}
		}
	}
}

// waitEnd waits for the run's end event and returns its state.
func (e *env) waitEnd(t *testing.T, runID string) agent.RunState {
	t.Helper()
	e.waitEvent(t, runID, 1, toolcall.EventCompleted, toolcall.EventFailed, toolcall.EventCancelled)
	st, err := e.runs.Get(t.Context(), runID)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// transcript returns the run's messages.
func (e *env) transcript(t *testing.T, runID string) []*toolfleetv1.Message {
	t.Helper()
	msgs, err := e.runs.Transcript(t.Context(), runID)
	if err != nil {
		t.Fatal(err)
	}
	return msgs
}

// results returns the tool results of the transcript, in order.
func results(msgs []*toolfleetv1.Message) []*toolfleetv1.ToolResult {
	var out []*toolfleetv1.ToolResult
	for _, m := range msgs {
		for _, p := range m.GetParts() {
			if r := p.GetToolResult(); r != nil {
				out = append(out, r)
			}
		}
	}
	return out
}

// lastResults checks the request's trailing tool results.
func lastResult(req *llm.Request) *toolfleetv1.ToolResult {
	r := results(req.Messages)
	if len(r) == 0 {
		return nil
	}
	return r[len(r)-1]
}

// history returns the run's current execution history.
func (e *env) history(t *testing.T, runID string) *historypb.History {
	t.Helper()
	it := e.runs.Temporal.GetWorkflowHistory(t.Context(), runID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	h := &historypb.History{}
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		h.Events = append(h.Events, ev)
	}
	return h
}

// record writes the run's history to testdata/histories/<name>.json when
// TOOLFLEET_RECORD_HISTORIES=1, for the replay test.
func (e *env) record(t *testing.T, runID, name string) {
	t.Helper()
	if os.Getenv("TOOLFLEET_RECORD_HISTORIES") != "1" {
		return
	}
	b, err := protojson.MarshalOptions{Indent: " "}.Marshal(e.history(t, runID))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join("testdata", "histories"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join("testdata", "histories", name+".json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}
