package trigger

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.temporal.io/sdk/worker"

	"github.com/toolfleet/toolfleet/internal/devstack/devstacktest"
	"github.com/toolfleet/toolfleet/orchestrator/program"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall"
)

// TestTriggers runs triggers on the embedded stack: a message starts one
// program however often it arrives, and a message the template cannot use
// lands on the dead-letter subject with the reason.
func TestTriggers(t *testing.T) {
	t.Parallel()
	s := devstacktest.Start(t)
	c := devstacktest.Client(t, s)
	w := worker.New(c, "triggers", worker.Options{DeadlockDetectionTimeout: program.DeadlockDetectionTimeout})
	program.Register(w, &program.Activities{})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	nc, err := nats.Connect(s.NATS.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	programs := &program.Programs{Temporal: c, TaskQueue: "triggers"}
	cfg := &Config{Triggers: []Trigger{{
		Name: "double", Subject: "toolfleet.triggers.double", RunAs: toolcall.Principal{Subject: "doubler"},
		Program: &ProgramTarget{Source: `result = args["n"] * 2`, Args: `{"n": {{ json .data.n }}}`},
	}}}
	r, err := Start(t.Context(), js, cfg, Options{Programs: programs, MemoryStorage: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	msg := nats.NewMsg("toolfleet.triggers.double")
	msg.Data = []byte(`{"n": 21}`)
	msg.Header.Set(nats.MsgIdHdr, "order-1")
	if _, err := js.PublishMsg(ctx, msg); err != nil {
		t.Fatal(err)
	}
	const id = "trg_double_morder-1"
	st := waitProgram(ctx, t, programs, id)
	if st.Status != program.StatusCompleted || st.Output.ResultJSON != "42" {
		t.Fatalf("program %s: %+v, want COMPLETED with 42", id, st)
	}
	first, err := c.DescribeWorkflowExecution(ctx, id, "")
	if err != nil {
		t.Fatal(err)
	}

	// Republished with the same Nats-Msg-Id: JetStream drops it.
	ack, err := js.PublishMsg(ctx, msg)
	if err != nil || !ack.Duplicate {
		t.Fatalf("republish: %+v %v, want a duplicate", ack, err)
	}
	// Redelivered (the same stored message handled again): the start finds the
	// program and starts nothing.
	again := fetch(ctx, t, js, DefaultStream, "toolfleet.triggers.double")
	if got, err := runID("double", again); got != id || err != nil {
		t.Fatalf("the redelivered message maps to %q (%v), want %q", got, err, id)
	}
	r.handle(ctx, cfg.Triggers[0], again)
	second, err := c.DescribeWorkflowExecution(ctx, id, "")
	if err != nil {
		t.Fatal(err)
	}
	if a, b := first.GetWorkflowExecutionInfo().GetExecution().GetRunId(), second.GetWorkflowExecutionInfo().GetExecution().GetRunId(); a != b {
		t.Fatalf("the redelivered message started another execution: run %s, then %s", a, b)
	}

	// Not JSON: the template has no .data.n, so it is a dead letter.
	bad := nats.NewMsg("toolfleet.triggers.double")
	bad.Data = []byte("not json")
	if _, err := js.PublishMsg(ctx, bad); err != nil {
		t.Fatal(err)
	}
	dead := fetch(ctx, t, js, DeadLetterStream, DefaultDeadLetter)
	if got := dead.Headers().Get(HeaderTrigger); got != "double" || !strings.Contains(dead.Headers().Get(HeaderReason), "template") ||
		string(dead.Data()) != "not json" {
		t.Fatalf("dead letter %q with headers %v, want the message with a template reason", dead.Data(), dead.Headers())
	}

	if got := r.List(); len(got) != 1 || got[0].Name != "double" || got[0].Target != "program" {
		t.Fatalf("List() = %+v", got)
	}
	if got := cfg.Proto(); len(got) != 1 || got[0].GetSubject() != "toolfleet.triggers.double" {
		t.Fatalf("Proto() = %v", got)
	}
}

// waitProgram waits for a program that a trigger starts to exist and end.
func waitProgram(ctx context.Context, t *testing.T, p *program.Programs, id string) *program.Status {
	t.Helper()
	for {
		st, err := p.Get(ctx, id)
		if err == nil && st.Done() {
			return st
		}
		select {
		case <-ctx.Done():
			t.Fatalf("program %s did not end: %v %v", id, st, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// fetch reads the first message on subject from stream.
func fetch(ctx context.Context, t *testing.T, js jetstream.JetStream, stream, subject string) jetstream.Msg {
	t.Helper()
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		t.Fatal(err)
	}
	msg, err := cons.Next(jetstream.FetchMaxWait(20 * time.Second))
	if err != nil {
		t.Fatalf("no message on %s: %v", subject, err)
	}
	return msg
}

func TestLoad(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("sum.star", "result = 1\n")
	tests := []struct {
		name, yaml, wantErr string
	}{
		{"program file and agent", `
triggers:
  - name: orders
    subject: toolfleet.triggers.orders.>
    run_as: {subject: bot, scopes: ["tools:call"]}
    program: {file: sum.star, tools: ["Calculator.*"], args: '{"n": {{ json .data.n }}}'}
  - name: support
    subject: toolfleet.triggers.support
    run_as: {subject: support-bot}
    agent: {model: "scripted:demo", prompt: "{{ .data.q }}"}
`, ""},
		// A trigger without run_as would run as the orchestrator itself.
		{"no run_as", "triggers: [{name: a, subject: toolfleet.triggers.a, program: {source: 'x = 1'}}]\n", "run_as"},
		{"blank run_as", "triggers: [{name: a, subject: toolfleet.triggers.a, run_as: {subject: ' '}, agent: {model: 'a:b'}}]\n", "run_as"},
		{"unknown field", "triggers: [{name: a, subject: toolfleet.triggers.a, program: {source: 'x = 1'}, extra: 1}]\n", "unknown field"},
		{"both targets", "triggers: [{name: a, subject: toolfleet.triggers.a, program: {source: 'x = 1'}, agent: {model: 'a:b'}}]\n", "exactly one"},
		{"subject outside", "triggers: [{name: a, subject: orders, program: {source: 'x = 1'}}]\n", "subject"},
		{"bad name", "triggers: [{name: A_B, subject: toolfleet.triggers.a, program: {source: 'x = 1'}}]\n", "name"},
		{"syntax error", "triggers: [{name: a, subject: toolfleet.triggers.a, program: {source: 'x = (1 +* 2)'}}]\n", "a.star:1:9"},
		{"bad template", "triggers: [{name: a, subject: toolfleet.triggers.a, program: {source: 'x = 1', args: '{{ .x'}}]\n", "args"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := Load(write("t"+string(rune('0'+i))+".yaml", tt.yaml))
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if cfg.Triggers[0].Program.Source != "result = 1\n" {
					t.Fatalf("program file not read: %q", cfg.Triggers[0].Program.Source)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Load: %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}
