package agentapi_test

import (
	"net/http/httptest"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/toolfleet/toolfleet/e2e"
	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/gen/toolfleet/v1/toolfleetv1connect"
	"github.com/toolfleet/toolfleet/internal/devstack/devstacktest"
	"github.com/toolfleet/toolfleet/orchestrator/agent"
	"github.com/toolfleet/toolfleet/orchestrator/agent/agenttest"
	"github.com/toolfleet/toolfleet/orchestrator/runner"
	"github.com/toolfleet/toolfleet/sdk/llm"
)

// TestTenancy is issue 21 §2 as an attacker tries it, with two principals on
// a real gateway, embedded Temporal and NATS: mallory aims at alice's
// program through the AgentService (same id, reserved ids, a different spec)
// and gets a clear refusal each time, and alice's program is unaffected.
func TestTenancy(t *testing.T) {
	t.Parallel()
	stack := devstacktest.Start(t)
	fleet := e2e.Start(t, e2e.Options{NATSURL: stack.NATS.URL()})
	models := agent.NewResolver()
	models.Register("idle", &agenttest.ByTurn{Turns: []llm.ScriptTurn{llm.SayText("ok")}})
	o, err := runner.Start(t.Context(), runner.Config{TemporalAddress: stack.Temporal.Address(), Namespace: stack.Namespace(),
		TaskQueue: "tenancy-test", NATSURL: stack.NATS.URL(), GatewayAddress: fleet.Addr, Models: models, MemoryStorage: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(o.Stop)
	_, ah := o.AgentService(testAuth).Handler()
	runs := httptest.NewServer(ah)
	t.Cleanup(runs.Close)
	_, ph := o.ProgramService(testAuth).Handler()
	progs := httptest.NewServer(ph)
	t.Cleanup(progs.Close)
	const allScopes = "runs:start,runs:read,runs:approve,runs:cancel,programs:run,programs:read,programs:approve,tools:call,schematest:read"
	aliceRuns := toolfleetv1connect.NewAgentServiceClient(runs.Client(), runs.URL, as("alice:"+allScopes))
	alicePrograms := toolfleetv1connect.NewProgramServiceClient(progs.Client(), progs.URL, as("alice:"+allScopes))
	malloryRuns := toolfleetv1connect.NewAgentServiceClient(runs.Client(), runs.URL, as("mallory:"+allScopes))
	malloryPrograms := toolfleetv1connect.NewProgramServiceClient(progs.Client(), progs.URL, as("mallory:"+allScopes))
	ctx := t.Context()

	// alice's program waits for her approval of a call (SchemaTest.Types requires one).
	const victim = "shared-1"
	if _, err := alicePrograms.RunProgram(ctx, connect.NewRequest(&toolfleetv1.RunProgramRequest{ProgramId: victim,
		Tools: []string{"SchemaTest.Types"}, Source: "r = SchemaTest_Types(s='x')\nresult = r.ok\n"})); err != nil {
		t.Fatal(err)
	}
	var callID string
	for deadline := time.Now().Add(30 * time.Second); callID == ""; time.Sleep(50 * time.Millisecond) {
		st, err := alicePrograms.GetProgram(ctx, connect.NewRequest(&toolfleetv1.GetProgramRequest{ProgramId: victim}))
		if err != nil {
			t.Fatal(err)
		}
		if p := st.Msg.GetPendingApprovals(); len(p) > 0 {
			callID = p[0].GetCallId()
		}
		if time.Now().After(deadline) {
			t.Fatalf("the program never asked for approval: %v", st.Msg)
		}
	}

	spec := func(id string, tools ...string) *toolfleetv1.StartRunRequest {
		return &toolfleetv1.StartRunRequest{RunId: id, Model: "scripted:idle", Messages: []*toolfleetv1.Message{llm.User("hi")},
			Tools: tools}
	}
	attacks := []struct {
		name string
		call func() error
		want connect.Code
	}{
		{"StartRun with the program's id", func() error {
			_, err := malloryRuns.StartRun(ctx, connect.NewRequest(spec(victim)))
			return err
		}, connect.CodeAlreadyExists},
		{"StartRun with the program's id, as its owner", func() error {
			_, err := aliceRuns.StartRun(ctx, connect.NewRequest(spec(victim)))
			return err
		}, connect.CodeAlreadyExists},
		{"DecideApproval of the program's call as a run", func() error {
			_, err := malloryRuns.DecideApproval(ctx, connect.NewRequest(&toolfleetv1.DecideApprovalRequest{RunId: victim, CallId: callID, Approved: true}))
			return err
		}, connect.CodeNotFound},
		{"SendMessage to the program's id", func() error {
			_, err := malloryRuns.SendMessage(ctx, connect.NewRequest(&toolfleetv1.SendMessageRequest{RunId: victim, Message: llm.User("hi")}))
			return err
		}, connect.CodeNotFound},
		{"DecideProgramApproval of another's program", func() error {
			_, err := malloryPrograms.DecideProgramApproval(ctx, connect.NewRequest(&toolfleetv1.DecideProgramApprovalRequest{ProgramId: victim, CallId: callID, Approved: true}))
			return err
		}, connect.CodeNotFound},
		{"StartRun with a trigger's id", func() error {
			_, err := malloryRuns.StartRun(ctx, connect.NewRequest(spec("trg_orders_m17")))
			return err
		}, connect.CodeInvalidArgument},
		{"RunProgram with a trigger's id", func() error {
			_, err := malloryPrograms.RunProgram(ctx, connect.NewRequest(&toolfleetv1.RunProgramRequest{ProgramId: "trg_orders_m17", Source: "result = 1\n"}))
			return err
		}, connect.CodeInvalidArgument},
		{"RunProgram with a code-mode child's id", func() error {
			_, err := malloryPrograms.RunProgram(ctx, connect.NewRequest(&toolfleetv1.RunProgramRequest{ProgramId: "alice-run-program-1-0", Source: "result = 1\n"}))
			return err
		}, connect.CodeInvalidArgument},
		{"StartRun with a code-mode child's id", func() error {
			_, err := malloryRuns.StartRun(ctx, connect.NewRequest(spec("alice-run-program-1-0")))
			return err
		}, connect.CodeInvalidArgument},
	}
	for _, a := range attacks {
		if err := a.call(); connect.CodeOf(err) != a.want {
			t.Errorf("%s: %v, want %s", a.name, err, a.want)
		}
	}

	// A run's id is not a program's either, and a repeat of a start must be the same start.
	if _, err := aliceRuns.StartRun(ctx, connect.NewRequest(spec("alice-run", "SchemaTest.Types"))); err != nil {
		t.Fatal(err)
	}
	if _, err := malloryPrograms.RunProgram(ctx, connect.NewRequest(&toolfleetv1.RunProgramRequest{ProgramId: "alice-run", Source: "result = 1\n"})); connect.CodeOf(err) != connect.CodeAlreadyExists {
		t.Errorf("RunProgram with a run's id: %v, want AlreadyExists", err)
	}
	if _, err := aliceRuns.StartRun(ctx, connect.NewRequest(spec("alice-run", "SchemaTest.Types"))); err != nil {
		t.Errorf("the same start again: %v, want OK (idempotent)", err)
	}
	if _, err := aliceRuns.StartRun(ctx, connect.NewRequest(spec("alice-run", "SchemaTest.*"))); connect.CodeOf(err) != connect.CodeAlreadyExists {
		t.Errorf("a start with another spec: %v, want AlreadyExists", err)
	}

	// The victim's program is unaffected: still waiting, then approved by alice, it completes.
	st, err := alicePrograms.GetProgram(ctx, connect.NewRequest(&toolfleetv1.GetProgramRequest{ProgramId: victim}))
	if err != nil || st.Msg.GetStatus() != toolfleetv1.ProgramStatus_PROGRAM_STATUS_WAITING_APPROVAL {
		t.Fatalf("the victim's program: %v %v, want WAITING_APPROVAL", st, err)
	}
	if _, err := alicePrograms.DecideProgramApproval(ctx, connect.NewRequest(&toolfleetv1.DecideProgramApprovalRequest{ProgramId: victim, CallId: callID, Approved: true})); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		st, err := alicePrograms.GetProgram(ctx, connect.NewRequest(&toolfleetv1.GetProgramRequest{ProgramId: victim}))
		if err != nil {
			t.Fatal(err)
		}
		if st.Msg.GetDone() {
			if st.Msg.GetStatus() != toolfleetv1.ProgramStatus_PROGRAM_STATUS_COMPLETED {
				t.Fatalf("the victim's program ended %s: %s", st.Msg.GetStatus(), st.Msg.GetError())
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the victim's program did not finish: %v", st.Msg)
		}
	}
}
