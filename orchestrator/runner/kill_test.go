package runner_test

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/e2e"
	kvv1 "github.com/toolfleet/toolfleet/gen/tools/kv/v1"
	"github.com/toolfleet/toolfleet/internal/devstack/devstacktest"
	"github.com/toolfleet/toolfleet/orchestrator/agent"
	"github.com/toolfleet/toolfleet/orchestrator/agent/agenttest"
	"github.com/toolfleet/toolfleet/orchestrator/runner/runnertest"
	"github.com/toolfleet/toolfleet/orchestrator/runstore"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/llmtest"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/workers/kv/kv"
)

// The orchestrator of the kill test runs in a child process: this test
// binary run again (runnertest), until it is killed.
func TestMain(m *testing.M) {
	if runnertest.IsChild() {
		models := agent.NewResolver()
		models.Register("kill", killScript())
		os.Exit(runnertest.Serve(models))
	}
	os.Exit(m.Run())
}

// killScript is the child's model: turn 1 stores kill.1, turn 2 streams a
// word, thinks for a while (the parent kills the process then), and stores
// kill.2; turn 3 answers.
func killScript() *agenttest.ByTurn {
	return &agenttest.ByTurn{
		Turns: []llmtest.ScriptTurn{
			llmtest.CallTools("", llm.CallPart("c1", "KV_Put", map[string]any{"key": "kill.1", "value": "one"})),
			llmtest.CallTools("thinking", llm.CallPart("c2", "KV_Put", map[string]any{"key": "kill.2", "value": "two"})),
			llmtest.SayText("both stored"),
		},
		BeforeReply: func(ctx context.Context, turn int) error {
			if turn != 2 {
				return nil
			}
			// Announce the turn, then think: the parent kills us in between.
			nc, err := nats.Connect(runnertest.NATSURL())
			if err != nil {
				return err
			}
			defer nc.Close()
			if err := nc.Publish("killtest.thinking", nil); err != nil {
				return err
			}
			_ = nc.Flush()
			t := time.NewTimer(3 * time.Second)
			defer t.Stop()
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-t.C:
				return nil
			}
		},
	}
}

// TestKillMidTurn runs the orchestrator in a separate process, kills it with
// SIGKILL in the middle of a model turn, starts it again, and checks that the
// run finishes with every side effect done exactly once.
func TestKillMidTurn(t *testing.T) {
	t.Parallel()
	stack := devstacktest.Start(t)
	fleet := e2e.Start(t, e2e.Options{NATSURL: stack.NATS.URL()})
	nc, err := nats.Connect(stack.NATS.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	bucket, err := kv.OpenBucket(t.Context(), js, kv.BucketConfig{})
	if err != nil {
		t.Fatal(err)
	}
	puts := &countingKV{Service: kv.New(bucket), n: map[string]int{}}
	fleet.AddWorker(t, func(w *tool.Worker) { kvv1.RegisterKVServiceServer(w, puts) })
	fleet.WaitTool(t, "KV.Put")

	thinking := make(chan struct{}, 4)
	sub, err := nc.Subscribe("killtest.thinking", func(*nats.Msg) {
		select {
		case thinking <- struct{}{}:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })

	child := runnertest.Start(t, stack, fleet.Addr, "kill-test")

	// Start the run from here: the store and Temporal are shared, the worker is the child's.
	store, err := runstore.OpenStore(t.Context(), js, runstore.StoreConfig{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	runs := &agent.Runs{Temporal: devstacktest.Client(t, stack), Store: store, TaskQueue: "kill-test"}
	id := "kill-run"
	if _, err := runs.Start(t.Context(), id, agent.RunSpec{Model: agent.ModelSpec{Spec: llm.Spec{Provider: "scripted", Name: "kill"}},
		Tools: []string{"KV.Put"}, IdleTimeout: -1}, toolcall.Principal{Subject: "ana"}, llm.User("store two values")); err != nil {
		t.Fatal(err)
	}

	wait := func(what string, ch <-chan struct{}) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(2 * time.Minute):
			t.Fatalf("timed out waiting for %s", what)
		}
	}
	wait("turn 2 to start", thinking)
	child.Kill()
	if n := puts.count("kill.2"); n != 0 {
		t.Fatalf("kill.2 stored %d times before the kill; the kill was not mid-turn", n)
	}
	child.Restart()

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cons, err := js.OrderedConsumer(ctx, toolcall.DefaultEventStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{toolcall.EventSubject(id, ">")}})
	if err != nil {
		t.Fatal(err)
	}
	for {
		msg, err := cons.Next(jetstream.FetchContext(ctx))
		if err != nil {
			t.Fatalf("waiting for the run to end: %v", err)
		}
		ev, err := toolcall.DecodeEvent(msg.Data())
		if err != nil {
			t.Fatal(err)
		}
		if ev.GetKind() == toolcall.EventCompleted || ev.GetKind() == toolcall.EventFailed {
			break
		}
	}
	st, err := runs.Get(t.Context(), id)
	if err != nil || st.Status != agent.StatusCompleted || st.Answer != "both stored" {
		t.Fatalf("state %+v (%v), want completed", st, err)
	}
	for _, k := range []string{"kill.1", "kill.2"} {
		if n := puts.count(k); n != 1 {
			t.Errorf("%s stored %d times, want exactly once", k, n)
		}
	}
	msgs, err := runs.Transcript(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 6 {
		t.Fatalf("%d messages, want 6 (user, call, result, call, result, answer)", len(msgs))
	}
}

// countingKV counts Put calls per key: the side-effect counter.
type countingKV struct {
	*kv.Service
	mu sync.Mutex
	n  map[string]int
}

func (c *countingKV) Put(ctx context.Context, req *kvv1.PutRequest) (*kvv1.PutResponse, error) {
	c.mu.Lock()
	c.n[req.GetKey()]++
	c.mu.Unlock()
	return c.Service.Put(ctx, req)
}

func (c *countingKV) count(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[key]
}
