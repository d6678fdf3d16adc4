package agentapi_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/gen/toolfleet/v1/toolfleetv1connect"
	"github.com/toolfleet/toolfleet/orchestrator/agent"
	"github.com/toolfleet/toolfleet/orchestrator/agent/agenttest"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/llmtest"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TestSendMessageContinues is issue 21 §2's SendMessage to a closed run: a
// completed run goes on with its counters, start time and budgets (a restart
// cannot be used to reset its tool-call budget), under the scopes its
// starter still holds; a cancelled run stays closed; another principal's
// message is refused and changes nothing.
func TestSendMessageContinues(t *testing.T) {
	t.Parallel()
	models := agent.NewResolver()
	multiply := func(a, b int) llmtest.ScriptTurn {
		return llmtest.CallTools("", llm.CallPart("m", "Calculator_Multiply", map[string]any{"a": a, "b": b}))
	}
	models.Register("cont", &agenttest.ByTurn{Turns: []llmtest.ScriptTurn{
		multiply(2, 3), llmtest.SayText("first"), multiply(4, 5), llmtest.SayText("second"), multiply(6, 7), llmtest.SayText("third")}})
	models.Register("idle", &agenttest.ByTurn{Turns: []llmtest.ScriptTurn{llmtest.SayText("ok")}})
	// The first turn of "ending" waits for release: a message sent meanwhile
	// reaches a run that will close on its answer.
	inTurn, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	models.Register("ending", &agenttest.ByTurn{Turns: []llmtest.ScriptTurn{llmtest.SayText("first"), llmtest.SayText("second")},
		BeforeReply: func(ctx context.Context, turn int) error {
			if turn != 1 {
				return nil
			}
			once.Do(func() { close(inTurn) })
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}})
	tn := startTenants(t, "continue-test", models)
	ctx := t.Context()
	getRun := func(id string) *toolfleetv1.GetRunResponse {
		t.Helper()
		st, err := tn.aliceRuns.GetRun(ctx, connect.NewRequest(&toolfleetv1.GetRunRequest{RunId: id}))
		if err != nil {
			t.Fatal(err)
		}
		return st.Msg
	}
	// closed waits until run id's workflow has closed n times in all.
	closed := func(id string, n int) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
			resp, err := tn.o.Runs.Temporal.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
				Query: fmt.Sprintf("WorkflowId = '%s' AND ExecutionStatus != 'Running'", id)})
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.GetExecutions()) >= n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("run %s closed %d times, want %d", id, len(resp.GetExecutions()), n)
			}
		}
	}

	// A budget of 2 tool calls: the first execution spends 1.
	const id = "alice-cont"
	if _, err := tn.aliceRuns.StartRun(ctx, connect.NewRequest(&toolfleetv1.StartRunRequest{RunId: id, Model: "scripted:cont",
		Messages: []*toolfleetv1.Message{llm.User("go")}, Tools: []string{"Calculator.*"},
		IdleTimeout: durationpb.New(-time.Second), Budget: &toolfleetv1.Budget{MaxToolCalls: 2}})); err != nil {
		t.Fatal(err)
	}
	closed(id, 1)
	first := getRun(id)
	if first.GetStatus() != toolfleetv1.RunStatus_RUN_STATUS_COMPLETED || first.GetToolCalls() != 1 || first.GetTurns() != 2 {
		t.Fatalf("first execution: %v, want COMPLETED after 2 turns and 1 call", first)
	}
	// mallory's message is refused and starts nothing.
	if _, err := tn.malloryRuns.SendMessage(ctx, connect.NewRequest(&toolfleetv1.SendMessageRequest{RunId: id, Message: llm.User("mine now")})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("mallory's SendMessage: %v, want NotFound", err)
	}
	// alice continues it, no longer holding calculator:use.
	aliceLess := toolfleetv1connect.NewAgentServiceClient(http.DefaultClient, tn.runsURL,
		as("alice:runs:start,runs:read,tools:call"))
	if _, err := aliceLess.SendMessage(ctx, connect.NewRequest(&toolfleetv1.SendMessageRequest{RunId: id, Message: llm.User("again")})); err != nil {
		t.Fatal(err)
	}
	closed(id, 2)
	second := getRun(id)
	if second.GetStatus() != toolfleetv1.RunStatus_RUN_STATUS_COMPLETED || second.GetToolCalls() != 2 || second.GetTurns() != 4 ||
		!second.GetStartedAt().AsTime().Equal(first.GetStartedAt().AsTime()) {
		t.Errorf("second execution: %v, want COMPLETED after 4 turns and 2 calls, started when the first did (%v)", second, first.GetStartedAt().AsTime())
	}
	recordHistory(t, tn.o.Runs.Temporal, id, "resumed")
	// The execution it started runs with the scopes alice still holds.
	var in agent.RunInput
	iter := tn.o.Runs.Temporal.GetWorkflowHistory(ctx, id, "", false, 0)
	ev, err := iter.Next()
	if err != nil {
		t.Fatal(err)
	}
	if err := converter.GetDefaultDataConverter().FromPayloads(ev.GetWorkflowExecutionStartedEventAttributes().GetInput(), &in); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(in.Principal.Scopes, "calculator:use") || !slices.Contains(in.Principal.Scopes, "tools:call") || in.Resume == nil {
		t.Errorf("the continued execution runs as %+v (resume %+v), want alice's current scopes and the first execution's counters", in.Principal, in.Resume)
	}
	// The budget is spent now (2 of 2): a third message gets no more calls.
	if _, err := tn.aliceRuns.SendMessage(ctx, connect.NewRequest(&toolfleetv1.SendMessageRequest{RunId: id, Message: llm.User("once more")})); err != nil {
		t.Fatal(err)
	}
	closed(id, 3)
	if third := getRun(id); third.GetToolCalls() > 2 || third.GetStatus() == toolfleetv1.RunStatus_RUN_STATUS_COMPLETED {
		t.Errorf("third execution: %v, want the budget of 2 calls to hold", third)
	}

	// A message accepted during the last turn of a run that closes on its
	// answer is answered in that run, never acknowledged and dropped.
	const ending = "alice-ending"
	if _, err := tn.aliceRuns.StartRun(ctx, connect.NewRequest(&toolfleetv1.StartRunRequest{RunId: ending, Model: "scripted:ending",
		Messages: []*toolfleetv1.Message{llm.User("go")}, IdleTimeout: durationpb.New(-time.Second)})); err != nil {
		t.Fatal(err)
	}
	select {
	case <-inTurn:
	case <-time.After(time.Minute):
		t.Fatal("the run's first turn never started")
	}
	if _, err := tn.aliceRuns.SendMessage(ctx, connect.NewRequest(&toolfleetv1.SendMessageRequest{RunId: ending, Message: llm.User("one more")})); err != nil {
		close(release)
		t.Fatalf("SendMessage during the last turn: %v", err)
	}
	close(release)
	closed(ending, 1)
	if st := getRun(ending); st.GetTurns() != 2 || st.GetAnswer() != "second" {
		t.Errorf("run %s: %d turns, answer %q; want the message answered in turn 2", ending, st.GetTurns(), st.GetAnswer())
	}

	// A cancelled run stays closed.
	const gone = "alice-cancelled"
	if _, err := tn.aliceRuns.StartRun(ctx, connect.NewRequest(&toolfleetv1.StartRunRequest{RunId: gone, Model: "scripted:idle",
		Messages: []*toolfleetv1.Message{llm.User("hi")}})); err != nil {
		t.Fatal(err)
	}
	if _, err := tn.aliceRuns.CancelRun(ctx, connect.NewRequest(&toolfleetv1.CancelRunRequest{RunId: gone})); err != nil {
		t.Fatal(err)
	}
	closed(gone, 1)
	if _, err := tn.aliceRuns.SendMessage(ctx, connect.NewRequest(&toolfleetv1.SendMessageRequest{RunId: gone, Message: llm.User("wake up")})); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("SendMessage to a cancelled run: %v, want FailedPrecondition", err)
	}
	if st := getRun(gone); st.GetStatus() != toolfleetv1.RunStatus_RUN_STATUS_CANCELED {
		t.Errorf("the cancelled run is %s now, want CANCELED", st.GetStatus())
	}
}

// recordHistory writes the history of run id's latest execution among the
// agent's recorded histories (../agent/testdata/histories/<name>.json, which
// agent's TestReplay replays) when TOOLFLEET_RECORD_HISTORIES=1.
func recordHistory(t *testing.T, tc client.Client, id, name string) {
	t.Helper()
	if os.Getenv("TOOLFLEET_RECORD_HISTORIES") != "1" {
		return
	}
	h := &historypb.History{}
	for iter := tc.GetWorkflowHistory(t.Context(), id, "", false, 0); iter.HasNext(); {
		ev, err := iter.Next()
		if err != nil {
			t.Fatal(err)
		}
		h.Events = append(h.Events, ev)
	}
	b, err := protojson.MarshalOptions{Indent: " "}.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join("..", "agent", "testdata", "histories", name+".json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestSendMessageCutsIdleRun is issue 32 §2: a run that answered and waits
// for its next message (idle_timeout) takes the sender's current scopes with
// the message, as a closed run does when it is started again. alice starts
// it holding tools:call (what Calculator.Multiply needs), loses it, and
// sends a message: the next turn's Multiply is refused by the gateway (auth
// on) as a permission failure the model sees, and never runs.
func TestSendMessageCutsIdleRun(t *testing.T) {
	t.Parallel()
	models := agent.NewResolver()
	models.Register("idlecut", &agenttest.ByTurn{Turns: []llmtest.ScriptTurn{
		llmtest.SayText("first"),
		llmtest.CallTools("", llm.CallPart("m", "Calculator_Multiply", map[string]any{"a": 6, "b": 7})),
		llmtest.SayText("second")}})
	tn := startTenantsAt(t, true, "idle-cut-test", models)
	ctx := t.Context()
	const id = "alice-idle"
	getRun := func() *toolfleetv1.GetRunResponse {
		t.Helper()
		st, err := tn.aliceRuns.GetRun(ctx, connect.NewRequest(&toolfleetv1.GetRunRequest{RunId: id}))
		if err != nil {
			t.Fatal(err)
		}
		return st.Msg
	}
	idleAfter := func(turns int32) *toolfleetv1.GetRunResponse {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
			if st := getRun(); st.GetIdle() && st.GetTurns() == turns {
				return st
			} else if time.Now().After(deadline) {
				t.Fatalf("run %s is not idle after %d turns: %v", id, turns, st)
			}
		}
	}
	if _, err := tn.aliceRuns.StartRun(ctx, connect.NewRequest(&toolfleetv1.StartRunRequest{RunId: id, Model: "scripted:idlecut",
		Messages: []*toolfleetv1.Message{llm.User("hi")}, Tools: []string{"Calculator.*"},
		IdleTimeout: durationpb.New(5 * time.Minute)})); err != nil {
		t.Fatal(err)
	}
	idleAfter(1)
	before := tn.fleet.Calculator.Multiplies.Load()
	aliceLess := toolfleetv1connect.NewAgentServiceClient(http.DefaultClient, tn.runsURL,
		as("alice:runs:start,runs:read"))
	if _, err := aliceLess.SendMessage(ctx, connect.NewRequest(&toolfleetv1.SendMessageRequest{RunId: id, Message: llm.User("multiply")})); err != nil {
		t.Fatal(err)
	}
	st := idleAfter(3)
	if st.GetStatus() != toolfleetv1.RunStatus_RUN_STATUS_COMPLETED || st.GetToolCalls() != 1 {
		t.Errorf("run %s: %v, want COMPLETED after 3 turns and 1 call", id, st)
	}
	if n := tn.fleet.Calculator.Multiplies.Load() - before; n != 0 {
		t.Errorf("Multiply ran %d times for a sender without tools:call, want 0", n)
	}
	msgs, err := tn.o.Runs.Transcript(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var result *toolfleetv1.ToolResult
	for _, m := range msgs {
		for _, p := range m.GetParts() {
			if r := p.GetToolResult(); r != nil {
				result = r
			}
		}
	}
	if result == nil || !result.GetIsError() || !strings.Contains(result.GetContent(), "tools:call") {
		t.Errorf("the model saw %v, want an error result naming the missing permission", result)
	}
	t.Logf("the model saw: %s", result.GetContent())
}
