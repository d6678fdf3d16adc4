package trigger

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.temporal.io/sdk/worker"

	"github.com/toolfleet/toolfleet/e2e"
	"github.com/toolfleet/toolfleet/internal/devstack/devstacktest"
	"github.com/toolfleet/toolfleet/orchestrator/agent"
	"github.com/toolfleet/toolfleet/orchestrator/program"
	"github.com/toolfleet/toolfleet/orchestrator/runstore"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall"
	"github.com/toolfleet/toolfleet/sdk/client"
	"github.com/toolfleet/toolfleet/sdk/llm"
)

// A message starts an agent run whose prompt comes from the message, as the
// trigger's principal; in code mode its model answers with one program. The
// run id derives from Nats-Msg-Id, so a redelivery starts nothing new.
func TestAgentTrigger(t *testing.T) {
	t.Parallel()
	s := devstacktest.Start(t)
	fleet := e2e.Start(t, e2e.Options{NATSURL: s.NATS.URL()})
	nc, err := nats.Connect(s.NATS.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	store, err := runstore.OpenStore(t.Context(), js, runstore.StoreConfig{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	events, err := agent.OpenEvents(t.Context(), nc, js, agent.EventStreamConfig("", true))
	if err != nil {
		t.Fatal(err)
	}
	gw, err := client.New(fleet.Addr, client.WithRetry(client.RetryPolicy{MaxAttempts: 1}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gw.Close() })
	c := devstacktest.Client(t, s)
	w := worker.New(c, "agent-triggers", worker.Options{DeadlockDetectionTimeout: program.DeadlockDetectionTimeout})
	agent.Register(w, &agent.Activities{Store: store, Events: events, Gateway: gw, Models: agent.NewResolver()})
	program.Register(w, &program.Activities{Gateway: gw, Events: events})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	runs := &agent.Runs{Temporal: c, Store: store, TaskQueue: "agent-triggers"}

	cfg := &Config{Triggers: []Trigger{{
		Name: "support", Subject: "toolfleet.triggers.support", RunAs: toolcall.Principal{Subject: "bot", Scopes: []string{"tools:call"}},
		Agent: &AgentTarget{Model: "scripted:demo", Tools: []string{"Calculator.Add"}, Prompt: "add {{ .data.a }} and {{ .data.b }}", CodeMode: true},
	}}}
	r, err := Start(t.Context(), js, cfg, Options{Runs: runs, MemoryStorage: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	msg := nats.NewMsg("toolfleet.triggers.support")
	msg.Data = []byte(`{"a": 4, "b": 5}`)
	msg.Header.Set(nats.MsgIdHdr, "ticket-7")
	if _, err := js.PublishMsg(ctx, msg); err != nil {
		t.Fatal(err)
	}
	const id = "trg_support_mticket-7"
	var st agent.RunState
	for st.Status != agent.StatusCompleted {
		if st, err = runs.Get(ctx, id); ctx.Err() != nil {
			t.Fatalf("run %s did not complete: %+v %v", id, st, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st.Turn != 2 || !strings.HasPrefix(st.Answer, "4 + 5 = 9.") {
		t.Errorf("run %s: %d turns, answer %q; want 2 turns (one program) and 4 + 5 = 9", id, st.Turn, st.Answer)
	}
	if p, err := runs.Principal(ctx, id); err != nil || p.Subject != "bot" {
		t.Errorf("the run's principal = %+v (%v), want the trigger's run_as", p, err)
	}

	// The same stored message handled again: the run exists, nothing starts.
	first, err := c.DescribeWorkflowExecution(ctx, id, "")
	if err != nil {
		t.Fatal(err)
	}
	r.handle(ctx, cfg.Triggers[0], fetch(ctx, t, js, DefaultStream, "toolfleet.triggers.support"))
	second, err := c.DescribeWorkflowExecution(ctx, id, "")
	if err != nil {
		t.Fatal(err)
	}
	if a, b := first.GetWorkflowExecutionInfo().GetExecution().GetRunId(), second.GetWorkflowExecutionInfo().GetExecution().GetRunId(); a != b {
		t.Errorf("the redelivered message started another execution: run %s, then %s", a, b)
	}
	if msgs, err := runs.Transcript(ctx, id); err != nil || llm.MessageText(msgs[1]) != "add 4 and 5" {
		t.Errorf("transcript: %v, want the templated prompt after the code-mode system message", err)
	}
}
