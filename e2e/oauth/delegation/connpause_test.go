package delegation_test

import (
	"bytes"
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/nats-io/nats.go/jetstream"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/worker"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/internal/devstack/devstacktest"
	"github.com/toolfleet/toolfleet/orchestrator/agent"
	"github.com/toolfleet/toolfleet/orchestrator/agent/agenttest"
	"github.com/toolfleet/toolfleet/orchestrator/agentapi"
	"github.com/toolfleet/toolfleet/orchestrator/ids"
	"github.com/toolfleet/toolfleet/orchestrator/program"
	"github.com/toolfleet/toolfleet/orchestrator/programapi"
	"github.com/toolfleet/toolfleet/orchestrator/runstore"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall"
	"github.com/toolfleet/toolfleet/sdk/client"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/llmtest"
	"github.com/toolfleet/toolfleet/services/gateway"
	"github.com/toolfleet/toolfleet/services/gateway/connections"

	"github.com/toolfleet/toolfleet/e2e/oauth/hydratest"
)

// orchestrator is an agent worker on an embedded Temporal, calling the
// fleet's gateway as the orchestrator (tools:delegate) on behalf of each
// run's principal.
type orchestrator struct {
	runs     *agent.Runs
	programs *program.Programs
	models   *agent.Resolver
}

func startOrchestrator(t *testing.T, f *fleet) *orchestrator {
	t.Helper()
	ctx := t.Context()
	tc := devstacktest.Client(t, devstacktest.Start(t))
	store, err := runstore.OpenStore(ctx, f.js, runstore.StoreConfig{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	events, err := agent.OpenEvents(ctx, f.js.Conn(), f.js, agent.EventStreamConfig("", true))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "orchestrator",
		"scope": "tools:call " + gateway.ScopeDelegate, "exp": time.Now().Add(time.Hour).Unix()}).SignedString([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	gw, err := client.New(f.addr, client.WithToken(tok), client.WithRetry(client.RetryPolicy{MaxAttempts: 1}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gw.Close() })
	o := &orchestrator{models: agent.NewResolver()}
	const queue = "delegation-connpause"
	w := worker.New(tc, queue, worker.Options{})
	agent.Register(w, &agent.Activities{Store: store, Events: events, Gateway: gw, Models: o.models})
	program.Register(w, &program.Activities{Gateway: gw, Events: events})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	o.runs = &agent.Runs{Temporal: tc, Store: store, TaskQueue: queue}
	o.programs = &program.Programs{Temporal: tc, TaskQueue: queue}
	return o
}

// start starts a scripted run as subject: it calls Delegated.Profile once,
// then its last turn checks the result the model reads.
func (o *orchestrator) start(t *testing.T, id, subject string, isError bool, want string) {
	t.Helper()
	last := llmtest.SayText("done")
	last.Check = func(req *llm.Request) error {
		var got *toolfleetv1.ToolResult
		for _, m := range req.Messages {
			for _, p := range m.GetParts() {
				if r := p.GetToolResult(); r != nil {
					got = r
				}
			}
		}
		if got == nil || got.GetIsError() != isError || !strings.Contains(got.GetContent(), want) {
			return &resultError{got: got, want: want}
		}
		return nil
	}
	o.models.Register(id, &agenttest.ByTurn{Turns: []llmtest.ScriptTurn{
		llmtest.CallTools("", llm.CallPart("c1", "Delegated_Profile", map[string]any{"part": "name"})), last}})
	spec := agent.RunSpec{Tools: []string{"Delegated.Profile"}, Model: agent.ModelSpec{Spec: llm.Spec{Provider: "scripted", Name: id}}}
	if _, err := o.runs.Start(t.Context(), id, spec, toolcall.Principal{Subject: subject, Scopes: []string{"tools:call"}},
		llm.System("You are a test."), llm.User("read my profile")); err != nil {
		t.Fatalf("start %s: %v", id, err)
	}
}

type resultError struct {
	got  *toolfleetv1.ToolResult
	want string
}

func (e *resultError) Error() string {
	return "last tool result " + e.got.String() + ", want one containing " + e.want
}

// waitConnection waits until the run waits for a connection to acme (the
// n-th time its status is read as such after requested events), and
// returns the pending item.
func (o *orchestrator) waitConnection(t *testing.T, id string, requested int, js jetstream.JetStream) toolcall.Question {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	for {
		st, err := o.runs.Get(ctx, id)
		if err == nil && st.Status == agent.StatusWaitingInput && len(st.Questions) == 1 &&
			countEvents(t, js, id, toolcall.EventInputRequested) >= requested {
			return st.Questions[0]
		}
		select {
		case <-ctx.Done():
			t.Fatalf("run %s does not wait for a connection (%+v, %v)", id, st, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitEnd waits for the run to finish.
func (o *orchestrator) waitEnd(t *testing.T, id string) agent.RunState {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	for {
		st, err := o.runs.Get(ctx, id)
		if err == nil && st.Status != agent.StatusRunning && st.Status != agent.StatusWaitingInput && st.Status != agent.StatusWaitingApproval {
			return st
		}
		select {
		case <-ctx.Done():
			t.Fatalf("run %s did not end (%+v, %v)", id, st, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// writeHistoryEvent writes ev as JSON and every bytes field of it raw:
// payloads are bytes, which JSON shows in base64, where no token would be
// found.
func writeHistoryEvent(b *strings.Builder, ev proto.Message) {
	j, _ := protojson.Marshal(ev)
	b.Write(j)
	var walk func(m protoreflect.Message)
	walk = func(m protoreflect.Message) {
		m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			switch {
			case fd.IsList():
				l := v.List()
				for i := range l.Len() {
					if fd.Kind() == protoreflect.MessageKind {
						walk(l.Get(i).Message())
					} else if fd.Kind() == protoreflect.BytesKind {
						b.Write(l.Get(i).Bytes())
					}
				}
			case fd.IsMap():
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
					if fd.MapValue().Kind() == protoreflect.MessageKind {
						walk(mv.Message())
					} else if fd.MapValue().Kind() == protoreflect.BytesKind {
						b.Write(mv.Bytes())
					}
					return true
				})
			case fd.Kind() == protoreflect.MessageKind:
				walk(v.Message())
			case fd.Kind() == protoreflect.BytesKind:
				b.Write(v.Bytes())
			}
			return true
		})
	}
	walk(ev.ProtoReflect())
}

// streamText is every message of a JetStream stream (data and headers),
// filtered to subjects containing filter when set.
func streamText(t *testing.T, js jetstream.JetStream, stream, filter string) string {
	t.Helper()
	s, err := js.Stream(t.Context(), stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(t.Context(), seq)
		if err != nil || (filter != "" && !strings.Contains(m.Subject, filter)) {
			continue
		}
		b.Write(m.Data)
		for k, v := range m.Header {
			b.WriteString(k + ": " + strings.Join(v, ",") + "\n")
		}
	}
	return b.String()
}

func countEvents(t *testing.T, js jetstream.JetStream, runID, kind string) int {
	t.Helper()
	return strings.Count(streamText(t, js, toolcall.DefaultEventStream, runID), `"`+kind+`"`)
}

// TestRunWaitsForConnection: a run whose tool acts with alice's acme
// account, which she has not connected, waits (WAITING_INPUT, a connection
// item naming the provider, no authorization URL); an accept before she
// connects makes the call again and it waits again; she connects through
// Hydra's real redirects and the same call goes on with her token without
// her answering (the gateway resumes it), and the run completes. Bob's run,
// waiting for his own connection, is left alone; he declines: his model
// reads that he declined.
// No token Hydra issued is in the run's history, transcript or events, the
// gateway's events or logs.
func TestRunWaitsForConnection(t *testing.T) {
	f := startFleet(t, hydratest.Options{})
	conns := f.connections(keyFile(t, connections.NewKeyLine("k")))
	f.flow.set(conns.Handler())
	f.gateway(conns)
	o := startOrchestrator(t, f)
	conns.ResumeWith(&agentapi.Service{Runs: o.runs})
	ctx := t.Context()

	const id = "connpause-alice"
	callID := ids.RunCall(id, 1, 0)
	o.start(t, id, "alice", false, "profile of alice@acme")
	q := o.waitConnection(t, id, 1, f.js)
	if q.Method != toolcall.MethodConnect || q.Provider != "acme" || q.CallID != callID || !strings.Contains(q.Message, "toolfleet connections connect acme --scope") {
		t.Fatalf("pending item %+v, want a connection to acme for call %s", q, callID)
	}
	if strings.Contains(q.Message, "http") {
		t.Fatalf("the pending item carries a URL: %q", q.Message)
	}
	// Only a reply that fits: content is refused.
	if err := o.runs.AnswerQuestion(ctx, id, toolcall.Reply{CallID: callID, Key: q.Key, Action: "accept", ContentJSON: `{"x":1}`, Answerer: "alice"}); err == nil {
		t.Fatal("an answer with content was accepted")
	}
	// Accepted before connecting: the call is made again and waits again.
	if err := o.runs.AnswerQuestion(ctx, id, toolcall.Reply{CallID: callID, Key: q.Key, Action: "accept", Answerer: "alice"}); err != nil {
		t.Fatal(err)
	}
	q = o.waitConnection(t, id, 2, f.js)
	if len(f.tool.seen()) != 0 {
		t.Fatal("the tool ran without a connection")
	}
	// Bob's run waits for his own acme connection meanwhile.
	const bobRun = "connpause-bob"
	o.start(t, bobRun, "bob", true, "the user declined to connect acme")
	bq := o.waitConnection(t, bobRun, 1, f.js)
	// Alice connects as the CLI does (a fresh flow of her own), through
	// the gateway's page, Hydra's login and consent and the callback, and
	// her waiting call goes on without her answering it.
	link, err := conns.Start(ctx, "alice", "acme", q.Scopes)
	if err != nil {
		t.Fatal(err)
	}
	if code, page := connect(t, link, "alice@acme", f.hydra); code != http.StatusOK || !strings.Contains(page, "Connected your acme account") ||
		!strings.Contains(page, "1 call that waited for it goes on now") {
		t.Fatalf("connect: %d %s", code, page)
	}
	if st := o.waitEnd(t, id); st.Status != agent.StatusCompleted || st.ToolCalls != 1 || len(st.Questions) != 0 {
		t.Fatalf("alice's run: %+v, want completed after one call", st)
	}
	tokens := f.tool.seen()
	if len(tokens) != 1 {
		t.Fatalf("the worker saw %d tokens, want alice's one", len(tokens))
	}
	// The same call id all along: the gateway's events of the call name it.
	if calls := streamText(t, f.js, gateway.DefaultEventStream, ""); !strings.Contains(calls, callID) {
		t.Fatalf("no gateway event of call %s", callID)
	}

	// Alice's connection resumed nothing of Bob's; he declines: the model
	// reads it, the tool never ran for him.
	if st, err := o.runs.Get(ctx, bobRun); err != nil || len(st.Questions) != 1 || countEvents(t, f.js, bobRun, toolcall.EventInputRequested) != 1 {
		t.Fatalf("bob's run after alice connected: %+v %v, want still waiting for his connection", st, err)
	}
	if err := o.runs.AnswerQuestion(ctx, bobRun, toolcall.Reply{CallID: bq.CallID, Key: bq.Key, Action: "decline", Answerer: "bob"}); err != nil {
		t.Fatal(err)
	}
	if st := o.waitEnd(t, bobRun); st.Status != agent.StatusCompleted {
		t.Fatalf("bob's run: %+v, want completed", st)
	}
	if len(f.tool.seen()) != 1 {
		t.Fatal("the tool ran for bob")
	}

	// The grep: the runs' histories (every event, JSON), transcripts and
	// events, the gateway's call events and logs.
	haystack := func() string {
		var b strings.Builder
		for _, run := range []string{id, bobRun} {
			it := o.runs.Temporal.GetWorkflowHistory(ctx, run, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
			for it.HasNext() {
				ev, err := it.Next()
				if err != nil {
					t.Fatal(err)
				}
				writeHistoryEvent(&b, ev)
			}
			msgs, err := o.runs.Transcript(ctx, run)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range msgs {
				j, _ := protojson.Marshal(m)
				b.Write(j)
			}
		}
		b.WriteString(streamText(t, f.js, toolcall.DefaultEventStream, ""))
		b.WriteString(streamText(t, f.js, gateway.DefaultEventStream, ""))
		b.WriteString(f.logs.String())
		return b.String()
	}
	hay := haystack()
	if !strings.Contains(hay, "profile of alice@acme") || !strings.Contains(hay, callID) {
		t.Fatal("the haystack misses the run's result: the grep would prove nothing")
	}
	access, refresh := f.tap.tokens()
	if len(refresh) == 0 || len(access) == 0 {
		t.Fatal("the provider issued no refresh token: the grep would miss them")
	}
	for _, tok := range slices.Concat(tokens, access, refresh) {
		if strings.Contains(hay, tok) {
			t.Fatal("a token Hydra issued (access or refresh) appears in a history, transcript, event or log")
		}
	}
	// The grep can fail: a token planted in the run events is found.
	if _, err := f.js.Publish(ctx, toolcall.EventSubject(id, "planted"), []byte(`{"planted":"`+tokens[0]+`"}`)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(haystack(), tokens[0]) {
		t.Fatal("a planted token was not found: the grep cannot fail")
	}
}

// waitProgram waits until the program is in state want (with one pending
// item when it waits) after at least requested input.requested events.
func (o *orchestrator) waitProgram(t *testing.T, id string, js jetstream.JetStream, requested int, done bool) *program.Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	for {
		st, err := o.programs.Get(ctx, id)
		switch {
		case err == nil && done && st.Done():
			return st
		case err == nil && !done && st.Status == program.StatusWaitingInput && st.State != nil && len(st.State.Questions) == 1 &&
			countEvents(t, js, id, toolcall.EventInputRequested) >= requested:
			return st
		}
		select {
		case <-ctx.Done():
			t.Fatalf("program %s: %+v, %v", id, st, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// TestProgramWaitsForConnection: a program calling a tool that acts with
// carol's unconnected acme account waits for the connection like a run;
// carol connects through Hydra, and the same call goes on with her token
// (the gateway resumes it). Dave declines: his script reads an error value
// saying so. No token in the programs' histories or events.
func TestProgramWaitsForConnection(t *testing.T) {
	f := startFleet(t, hydratest.Options{})
	conns := f.connections(keyFile(t, connections.NewKeyLine("k")))
	f.flow.set(conns.Handler())
	f.gateway(conns)
	o := startOrchestrator(t, f)
	conns.ResumeWith(&programapi.Service{Programs: o.programs})
	ctx := t.Context()
	const src = "r = Delegated_Profile(part='name')\nresult = r.value['body'] if r.ok else r.error.kind + ': ' + r.error.message\n"
	start := func(id, subject string) {
		if _, err := o.programs.Start(ctx, program.Input{ProgramID: id, Source: src, Tools: []string{"Delegated.Profile"},
			Principal: toolcall.Principal{Subject: subject, Scopes: []string{"tools:call"}}, AskPeople: true}); err != nil {
			t.Fatalf("start %s: %v", id, err)
		}
	}

	const id = "connpause-carol"
	start(id, "carol")
	q := o.waitProgram(t, id, f.js, 1, false).State.Questions[0]
	if q.Method != toolcall.MethodConnect || q.Provider != "acme" || !strings.HasPrefix(q.CallID, id) {
		t.Fatalf("pending item %+v, want a connection to acme", q)
	}
	link, err := conns.Start(ctx, "carol", "acme", q.Scopes)
	if err != nil {
		t.Fatal(err)
	}
	if code, page := connect(t, link, "carol@acme", f.hydra); code != http.StatusOK || !strings.Contains(page, "1 call that waited for it goes on now") {
		t.Fatalf("connect: %d %s", code, page)
	}
	st := o.waitProgram(t, id, f.js, 0, true)
	if st.Status != program.StatusCompleted || st.Output == nil || st.Output.ResultJSON != `"profile of carol@acme"` {
		t.Fatalf("carol's program: %+v (%+v)", st, st.Output)
	}
	tokens := f.tool.seen()
	if len(tokens) != 1 {
		t.Fatalf("the worker saw %d tokens, want carol's one", len(tokens))
	}
	if calls := streamText(t, f.js, gateway.DefaultEventStream, ""); !strings.Contains(calls, q.CallID) {
		t.Fatalf("no gateway event of call %s", q.CallID)
	}

	const daveProg = "connpause-dave"
	start(daveProg, "dave")
	dq := o.waitProgram(t, daveProg, f.js, 1, false).State.Questions[0]
	if err := o.programs.AnswerQuestion(ctx, daveProg, toolcall.Reply{CallID: dq.CallID, Key: dq.Key, Action: "decline", Answerer: "dave"}); err != nil {
		t.Fatal(err)
	}
	st = o.waitProgram(t, daveProg, f.js, 0, true)
	if st.Status != program.StatusCompleted || st.Output == nil || !strings.Contains(st.Output.ResultJSON, "the user declined to connect acme") {
		t.Fatalf("dave's program: %+v (%+v)", st, st.Output)
	}

	var b strings.Builder
	for _, p := range []string{id, daveProg} {
		it := o.programs.Temporal.GetWorkflowHistory(ctx, p, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for it.HasNext() {
			ev, err := it.Next()
			if err != nil {
				t.Fatal(err)
			}
			writeHistoryEvent(&b, ev)
		}
	}
	// The histories' payloads are read: the script's result is in them.
	if !strings.Contains(b.String(), "profile of carol@acme") {
		t.Fatal("the histories miss the program's result: the grep would prove nothing")
	}
	b.WriteString(streamText(t, f.js, toolcall.DefaultEventStream, ""))
	b.WriteString(streamText(t, f.js, gateway.DefaultEventStream, ""))
	b.WriteString(f.logs.String())
	access, refresh := f.tap.tokens()
	if len(refresh) == 0 || len(access) == 0 {
		t.Fatal("the provider issued no refresh token: the grep would miss them")
	}
	for _, tok := range slices.Concat(tokens, access, refresh) {
		if strings.Contains(b.String(), tok) {
			t.Fatal("a token Hydra issued (access or refresh) appears in a history, event or log")
		}
	}
}
