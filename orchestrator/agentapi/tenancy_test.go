package agentapi_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/toolfleet/toolfleet/e2e"
	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/gen/toolfleet/v1/toolfleetv1connect"
	"github.com/toolfleet/toolfleet/internal/devstack/devstacktest"
	"github.com/toolfleet/toolfleet/orchestrator/agent"
	"github.com/toolfleet/toolfleet/orchestrator/agent/agenttest"
	"github.com/toolfleet/toolfleet/orchestrator/ids"
	"github.com/toolfleet/toolfleet/orchestrator/runner"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/llmtest"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TestTenancy is issue 21 §2 as an attacker tries it, with two principals on
// a real gateway, embedded Temporal and NATS: mallory aims at alice's
// program through the AgentService (same id, reserved ids, a different spec)
// and gets a clear refusal each time, and alice's program is unaffected.
func TestTenancy(t *testing.T) {
	t.Parallel()
	models := agent.NewResolver()
	models.Register("idle", &agenttest.ByTurn{Turns: []llmtest.ScriptTurn{llmtest.SayText("ok")}})
	tn := startTenants(t, "tenancy-test", models)
	o, aliceRuns, alicePrograms, malloryRuns, malloryPrograms := tn.o, tn.aliceRuns, tn.alicePrograms, tn.malloryRuns, tn.malloryPrograms
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

	// Another principal's start with alice's run id is refused before
	// anything is stored for it: its messages never reach the blob store
	// (a control start of alice's shows the check would see them).
	blobStored := func(runID, text string) bool {
		t.Helper()
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(&toolfleetv1.Conversation{Messages: []*toolfleetv1.Message{llm.User(text)}})
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		_, err = o.Runs.Store.Messages(ctx, runID+"/sha256-"+hex.EncodeToString(sum[:]))
		if err != nil && !errors.Is(err, agent.ErrNotFound) {
			t.Fatal(err)
		}
		return err == nil
	}
	steal := spec("alice-run", "SchemaTest.Types")
	steal.Messages = []*toolfleetv1.Message{llm.User("mallory's 1 GiB, in spirit")}
	if _, err := malloryRuns.StartRun(ctx, connect.NewRequest(steal)); connect.CodeOf(err) != connect.CodeAlreadyExists {
		t.Errorf("StartRun with another's run id: %v, want AlreadyExists", err)
	} else if strings.Contains(err.Error(), "SchemaTest") || strings.Contains(err.Error(), "scripted") {
		t.Errorf("the refusal reveals the victim's run: %v", err)
	}
	if blobStored("alice-run", "mallory's 1 GiB, in spirit") {
		t.Error("a refused start stored its messages")
	}
	control := spec("alice-run-2")
	control.Messages = []*toolfleetv1.Message{llm.User("alice's own start")}
	if _, err := aliceRuns.StartRun(ctx, connect.NewRequest(control)); err != nil {
		t.Fatal(err)
	}
	if !blobStored("alice-run-2", "alice's own start") {
		t.Error("the control start's messages are not where the check looks")
	}

	// A program id repeated by its owner is the same program only for the
	// same spec; another script under it is refused, the same one is OK.
	victimReq := &toolfleetv1.RunProgramRequest{ProgramId: victim, Tools: []string{"SchemaTest.Types"},
		Source: "r = SchemaTest_Types(s='x')\nresult = r.ok\n"}
	if _, err := alicePrograms.RunProgram(ctx, connect.NewRequest(victimReq)); err != nil {
		t.Errorf("the same program start again: %v, want OK (idempotent)", err)
	}
	other := &toolfleetv1.RunProgramRequest{ProgramId: victim, Tools: []string{"SchemaTest.Types"}, Source: "result = 2\n"}
	if _, err := alicePrograms.RunProgram(ctx, connect.NewRequest(other)); connect.CodeOf(err) != connect.CodeAlreadyExists {
		t.Errorf("a program start with another spec: %v, want AlreadyExists", err)
	}
	if _, err := malloryPrograms.RunProgram(ctx, connect.NewRequest(victimReq)); connect.CodeOf(err) != connect.CodeAlreadyExists {
		t.Errorf("RunProgram with another's program id: %v, want AlreadyExists", err)
	}

	// A ListRuns page token is alice's: mallory's listing refuses it at
	// once, as it does a made-up one (issue 32 §7).
	var token []byte
	for deadline := time.Now().Add(30 * time.Second); len(token) == 0; time.Sleep(100 * time.Millisecond) {
		l, err := aliceRuns.ListRuns(ctx, connect.NewRequest(&toolfleetv1.ListRunsRequest{PageSize: 1}))
		if err != nil {
			t.Fatal(err)
		}
		token = l.Msg.GetNextPageToken()
		if time.Now().After(deadline) {
			t.Fatal("alice's runs come in one page of one")
		}
	}
	if _, err := aliceRuns.ListRuns(ctx, connect.NewRequest(&toolfleetv1.ListRunsRequest{PageSize: 1, PageToken: token})); err != nil {
		t.Errorf("alice's next page: %v", err)
	}
	for name, tc := range map[string]struct {
		c     toolfleetv1connect.AgentServiceClient
		token []byte
	}{"alice's token": {malloryRuns, token}, "a made-up token": {aliceRuns, []byte("made up")}} {
		start := time.Now()
		if _, err := tc.c.ListRuns(ctx, connect.NewRequest(&toolfleetv1.ListRunsRequest{PageSize: 1, PageToken: tc.token})); connect.CodeOf(err) != connect.CodeInvalidArgument || time.Since(start) > 2*time.Second {
			t.Errorf("ListRuns with %s: %v after %s, want InvalidArgument at once", name, err, time.Since(start))
		}
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

// TestCodeModeObeysTheRun is issue 21 §2's code-mode holes as an attacker
// would use them, on a real gateway, embedded Temporal and NATS: a code-mode
// program's calls wait for the approval the run's policy asks for, only the
// run's owner can decide them (mallory cannot see or decide them), and a
// program that fails still spends its calls against the run's budget.
func TestCodeModeObeysTheRun(t *testing.T) {
	t.Parallel()
	models := agent.NewResolver()
	runProgram := func(source string) llmtest.ScriptTurn {
		return llmtest.CallTools("", llm.CallPart("p1", agent.RunProgramTool, map[string]any{"source": source}))
	}
	models.Register("approve", &agenttest.ByTurn{Turns: []llmtest.ScriptTurn{
		runProgram("result = Calculator_Multiply(a=6, b=7).value['result']\n"), llmtest.SayText("done")}})
	// Two calls, then the program fails; the second turn tries to spend more.
	models.Register("fails", &agenttest.ByTurn{Turns: []llmtest.ScriptTurn{
		runProgram("Calculator_Multiply(a=1, b=1)\nCalculator_Multiply(a=2, b=2)\nfail('boom')\n"),
		runProgram("result = Calculator_Multiply(a=3, b=3).value['result']\n"), llmtest.SayText("done")}})
	tn := startTenants(t, "codemode-tenancy-test", models)
	fleet, aliceRuns, alicePrograms, malloryRuns, malloryPrograms := tn.fleet, tn.aliceRuns, tn.alicePrograms, tn.malloryRuns, tn.malloryPrograms
	ctx := t.Context()
	waitRun := func(id string) *toolfleetv1.GetRunResponse {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
			st, err := aliceRuns.GetRun(ctx, connect.NewRequest(&toolfleetv1.GetRunRequest{RunId: id}))
			if err != nil {
				t.Fatal(err)
			}
			switch st.Msg.GetStatus() {
			case toolfleetv1.RunStatus_RUN_STATUS_RUNNING, toolfleetv1.RunStatus_RUN_STATUS_WAITING_APPROVAL:
			default:
				return st.Msg
			}
			if time.Now().After(deadline) {
				t.Fatalf("run %s did not end: %v", id, st.Msg)
			}
		}
	}

	// The run's policy asks for approval of Calculator.Multiply, whose
	// contract does not: the program's call waits for alice.
	const runID = "alice-code"
	before := fleet.Calculator.Multiplies.Load()
	if _, err := aliceRuns.StartRun(ctx, connect.NewRequest(&toolfleetv1.StartRunRequest{RunId: runID, Model: "scripted:approve",
		Messages: []*toolfleetv1.Message{llm.User("6*7?")}, Tools: []string{"Calculator.*"}, CodeMode: true,
		IdleTimeout: durationpb.New(-time.Second), Approval: &toolfleetv1.ApprovalPolicy{Tools: []string{"Calculator.Multiply"}}})); err != nil {
		t.Fatal(err)
	}
	child := ids.CodeModeProgram(runID, 1, 0)
	var callID string
	for deadline := time.Now().Add(time.Minute); callID == ""; time.Sleep(50 * time.Millisecond) {
		st, err := alicePrograms.GetProgram(ctx, connect.NewRequest(&toolfleetv1.GetProgramRequest{ProgramId: child}))
		if err != nil && connect.CodeOf(err) != connect.CodeNotFound {
			t.Fatal(err)
		}
		if err == nil && len(st.Msg.GetPendingApprovals()) > 0 {
			callID = st.Msg.GetPendingApprovals()[0].GetCallId()
		}
		if time.Now().After(deadline) {
			t.Fatalf("the code-mode program never asked for approval (%v)", err)
		}
	}
	if n := fleet.Calculator.Multiplies.Load() - before; n != 0 {
		t.Fatalf("Multiply ran %d times before its approval", n)
	}
	// mallory can neither see the program nor decide its call, through either service.
	if _, err := malloryPrograms.GetProgram(ctx, connect.NewRequest(&toolfleetv1.GetProgramRequest{ProgramId: child})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("mallory's GetProgram of alice's code-mode program: %v, want NotFound", err)
	}
	if _, err := malloryPrograms.DecideProgramApproval(ctx, connect.NewRequest(&toolfleetv1.DecideProgramApprovalRequest{ProgramId: child, CallId: callID, Approved: true})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("mallory's DecideProgramApproval: %v, want NotFound", err)
	}
	if _, err := malloryRuns.DecideApproval(ctx, connect.NewRequest(&toolfleetv1.DecideApprovalRequest{RunId: runID, CallId: callID, Approved: true})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("mallory's DecideApproval on alice's run: %v, want NotFound", err)
	}
	if n := fleet.Calculator.Multiplies.Load() - before; n != 0 {
		t.Fatalf("Multiply ran %d times after mallory's attempts", n)
	}
	if _, err := alicePrograms.DecideProgramApproval(ctx, connect.NewRequest(&toolfleetv1.DecideProgramApprovalRequest{ProgramId: child, CallId: callID, Approved: true})); err != nil {
		t.Fatalf("the run's owner decides its program's call: %v", err)
	}
	if st := waitRun(runID); st.GetStatus() != toolfleetv1.RunStatus_RUN_STATUS_COMPLETED || st.GetToolCalls() != 2 {
		t.Errorf("run %s: %s with %d tool calls (%s), want COMPLETED with 2 (run_program and its call)",
			runID, st.GetStatus(), st.GetToolCalls(), st.GetFailureMessage())
	}
	if n := fleet.Calculator.Multiplies.Load() - before; n != 1 {
		t.Errorf("Multiply ran %d times, want 1", n)
	}
	recordHistory(t, tn.o.Runs.Temporal, runID, "codemode-approval")

	// A program that fails after two calls spends them: with a budget of
	// three calls the run has none left for a second program.
	const failing = "alice-fails"
	before = fleet.Calculator.Multiplies.Load()
	if _, err := aliceRuns.StartRun(ctx, connect.NewRequest(&toolfleetv1.StartRunRequest{RunId: failing, Model: "scripted:fails",
		Messages: []*toolfleetv1.Message{llm.User("go")}, Tools: []string{"Calculator.*"}, CodeMode: true,
		IdleTimeout: durationpb.New(-time.Second), Budget: &toolfleetv1.Budget{MaxToolCalls: 3}})); err != nil {
		t.Fatal(err)
	}
	st := waitRun(failing)
	if st.GetToolCalls() < 3 || st.GetStatus() == toolfleetv1.RunStatus_RUN_STATUS_COMPLETED {
		t.Errorf("run %s: %s with %d tool calls, want the budget of 3 spent (the failed program's 2 count) and the run stopped",
			failing, st.GetStatus(), st.GetToolCalls())
	}
	if n := fleet.Calculator.Multiplies.Load() - before; n != 2 {
		t.Errorf("Multiply ran %d times for run %s, want 2 (the second program is over the budget)", n, failing)
	}
	t.Logf("run %s: %s, %d tool calls, budget %q", failing, st.GetStatus(), st.GetToolCalls(), st.GetBudget())
	recordHistory(t, tn.o.Runs.Temporal, failing, "codemode-failed-program")
}

// tenants is an orchestrator on a real gateway, embedded Temporal and NATS,
// serving the AgentService and the ProgramService over HTTP, and clients of
// both for two principals holding every scope: alice and mallory.
type tenants struct {
	o                              *runner.Orchestrator
	runsURL, natsURL               string
	fleet                          *e2e.Fleet
	aliceRuns, malloryRuns         toolfleetv1connect.AgentServiceClient
	alicePrograms, malloryPrograms toolfleetv1connect.ProgramServiceClient
}

func startTenants(t *testing.T, queue string, models *agent.Resolver, configure ...func(*runner.Config)) *tenants {
	t.Helper()
	return startTenantsAt(t, false, queue, models, configure...)
}

// startTenantsAt is startTenants with the gateway's auth on when auth is set:
// then the gateway checks each call's delegated scopes, and the orchestrator
// calls it with a token holding tools:delegate and tools:approve.
func startTenantsAt(t *testing.T, auth bool, queue string, models *agent.Resolver, configure ...func(*runner.Config)) *tenants {
	t.Helper()
	stack := devstacktest.Start(t)
	fleet := e2e.Start(t, e2e.Options{NATSURL: stack.NATS.URL(), Auth: auth})
	cfg := runner.Config{TemporalAddress: stack.Temporal.Address(), Namespace: stack.Namespace(),
		TaskQueue: queue, NATSURL: stack.NATS.URL(), GatewayAddress: fleet.Addr, Models: models, MemoryStorage: true}
	if auth {
		cfg.GatewayToken = fleet.TokenFor(t, "orchestrator", "tools:delegate", "tools:approve")
	}
	for _, f := range configure {
		f(&cfg)
	}
	o, err := runner.Start(t.Context(), cfg)
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
	const allScopes = "runs:start,runs:read,runs:approve,runs:cancel,programs:run,programs:read,programs:approve,tools:call,schematest:read,calculator:use"
	return &tenants{o: o, fleet: fleet, runsURL: runs.URL, natsURL: stack.NATS.URL(),
		aliceRuns:       toolfleetv1connect.NewAgentServiceClient(runs.Client(), runs.URL, as("alice:"+allScopes)),
		alicePrograms:   toolfleetv1connect.NewProgramServiceClient(progs.Client(), progs.URL, as("alice:"+allScopes)),
		malloryRuns:     toolfleetv1connect.NewAgentServiceClient(runs.Client(), runs.URL, as("mallory:"+allScopes)),
		malloryPrograms: toolfleetv1connect.NewProgramServiceClient(progs.Client(), progs.URL, as("mallory:"+allScopes)),
	}
}
