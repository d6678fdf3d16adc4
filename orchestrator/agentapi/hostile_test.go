package agentapi_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/gen/toolfleet/v1/toolfleetv1connect"
	jsonqv1 "github.com/toolfleet/toolfleet/gen/tools/jsonq/v1"
	"github.com/toolfleet/toolfleet/orchestrator/agent"
	"github.com/toolfleet/toolfleet/orchestrator/agent/agenttest"
	"github.com/toolfleet/toolfleet/orchestrator/ids"
	"github.com/toolfleet/toolfleet/orchestrator/runner"
	"github.com/toolfleet/toolfleet/orchestrator/runstore"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/llmtest"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/workers/jsonq/jsonq"
)

// Issue 32, "a hostile tenant cannot hurt another": the stores a tenant
// writes through code mode, the run blob store's reserve and the run event
// stream, each against a real fleet (embedded NATS and Temporal, the
// gateway's auth on) and two principals.

// withJSONQuery adds a JSONQuery worker whose results may carry the
// 200,000-character values of echoValues.
func withJSONQuery(t *testing.T, tn *tenants) {
	t.Helper()
	tn.fleet.AddWorker(t, func(w *tool.Worker) {
		jsonqv1.RegisterJSONQueryServiceServer(w, jsonq.New(jsonq.Config{MaxOutputBytes: 2 << 20}))
	})
	tn.fleet.WaitTool(t, "JSONQuery.Query@1")
}

// runProgramTurn is a code-mode model turn running echoValues with calls calls.
func runProgramTurn(calls int) llmtest.ScriptTurn {
	return llmtest.CallTools("", llm.CallPart("p", agent.RunProgramTool,
		map[string]any{"source": echoValues, "args": map[string]any{"calls": calls}}))
}

// waitEnded waits until run id of c is neither running nor waiting.
func waitEnded(t *testing.T, c toolfleetv1connect.AgentServiceClient, id string) *toolfleetv1.GetRunResponse {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		st, err := c.GetRun(t.Context(), connect.NewRequest(&toolfleetv1.GetRunRequest{RunId: id}))
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

// programResults are the contents of run id's run_program results, in order.
func programResults(ctx context.Context, t *testing.T, tn *tenants, id string) []string {
	t.Helper()
	msgs, err := tn.o.Runs.Store.Load(ctx, id, -1)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range msgs {
		for _, p := range m.GetParts() {
			if r := p.GetToolResult(); r != nil && r.GetName() == agent.RunProgramTool {
				out = append(out, r.GetContent())
			}
		}
	}
	return out
}

// blobCounter counts the blobs of the run blob store listed under an owner.
func blobCounter(ctx context.Context, t *testing.T, natsURL string) func(owner string) int {
	t.Helper()
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	blobs, err := js.ObjectStore(ctx, runstore.DefaultBlobBucket)
	if err != nil {
		t.Fatal(err)
	}
	return func(owner string) int {
		t.Helper()
		infos, err := blobs.List(ctx)
		if err != nil && !errors.Is(err, jetstream.ErrNoObjectsFound) {
			t.Fatal(err)
		}
		n := 0
		for _, in := range infos {
			if strings.HasPrefix(in.Name, owner+"/") {
				n++
			}
		}
		return n
	}
}

// TestCodeModeProgramValuesQuota: the values a code-mode run's child
// program stores count against the run owner's byte quota, as a top-level
// program's do. Alice's run, against a 1 MiB quota, runs a program of 12
// calls of 400 KB: the program ends on the storage_quota limit after a few
// calls, her Held bytes hold its values, and the run's next program is
// refused on the same limit without starting. Mallory's run is not affected.
// Once the program has been closed for the retention (15 s: what the test
// reads first must not be freed under a loaded -race run), the reaper frees
// its values and alice's quota. Without the child's record nothing is
// counted: the program makes all 12 calls and alice holds almost nothing.
func TestCodeModeProgramValuesQuota(t *testing.T) {
	t.Parallel()
	models := agent.NewResolver()
	models.Register("filler", &agenttest.ByTurn{Turns: []llmtest.ScriptTurn{runProgramTurn(12), runProgramTurn(1), llmtest.SayText("done")}})
	models.Register("idle", &agenttest.ByTurn{Turns: []llmtest.ScriptTurn{llmtest.SayText("ok")}})
	tn := startTenantsAt(t, true, "codemode-quota-test", models, func(c *runner.Config) {
		c.PrincipalMaxBytes = 1 << 20
		c.Assets.Overrides = "toolfleet_runs.max-age=15s"
	})
	withJSONQuery(t, tn)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()

	const runID = "alice-code-filler"
	if _, err := tn.aliceRuns.StartRun(ctx, connect.NewRequest(&toolfleetv1.StartRunRequest{RunId: runID, Model: "scripted:filler",
		Messages: []*toolfleetv1.Message{llm.User("fill")}, Tools: []string{"JSONQuery.*"}, CodeMode: true,
		IdleTimeout: durationpb.New(-time.Second)})); err != nil {
		t.Fatal(err)
	}
	st := waitEnded(t, tn.aliceRuns, runID)
	if st.GetStatus() != toolfleetv1.RunStatus_RUN_STATUS_COMPLETED {
		t.Fatalf("alice's run: %v; want COMPLETED (its programs fail, the run goes on)", st)
	}
	child := ids.CodeModeProgram(runID, 1, 0)
	pg, err := tn.alicePrograms.GetProgram(ctx, connect.NewRequest(&toolfleetv1.GetProgramRequest{ProgramId: child}))
	if err != nil {
		t.Fatal(err)
	}
	pe := pg.Msg.GetProgramError()
	if pe.GetLimit() != "storage_quota" {
		t.Fatalf("alice's code-mode program of 12 calls of 400 KB against a 1 MiB quota: %v; want it ended on limit storage_quota", pg.Msg)
	}
	if n := pg.Msg.GetToolCalls(); n < 2 || n > 4 {
		t.Errorf("the program made %d calls of 400 KB within a 1 MiB quota; want 2 to 4", n)
	}
	held, _, err := tn.o.Runs.Store.Held(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if held < 1<<20 {
		t.Fatalf("alice holds %d bytes after her code-mode program; want its values, over 1 MiB", held)
	}
	res := programResults(ctx, t, tn, runID)
	if len(res) != 2 {
		t.Fatalf("run %s has %d run_program results %q; want 2", runID, len(res), res)
	}
	for i, r := range res {
		if !strings.Contains(r, "limit storage_quota") || !strings.Contains(r, "storage quota") {
			t.Errorf("run_program result %d %q; want the storage_quota limit in the owner's terms", i, r)
		}
		for _, bad := range natsText {
			if strings.Contains(strings.ToLower(r), bad) {
				t.Errorf("run_program result %d %q holds NATS internals (%q)", i, r, bad)
			}
		}
	}
	// The second program was refused before it started.
	if _, err := tn.alicePrograms.GetProgram(ctx, connect.NewRequest(&toolfleetv1.GetProgramRequest{ProgramId: ids.CodeModeProgram(runID, 2, 0)})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("the refused program: %v; want NotFound (never started)", err)
	}
	recordHistory(t, tn.o.Runs.Temporal, runID, "codemode-program-refused")

	// Mallory is not affected.
	if _, err := tn.malloryRuns.StartRun(ctx, connect.NewRequest(&toolfleetv1.StartRunRequest{RunId: "mallory-run", Model: "scripted:idle",
		Messages: []*toolfleetv1.Message{llm.User("hi")}, IdleTimeout: durationpb.New(-time.Second)})); err != nil {
		t.Fatalf("mallory's StartRun: %v", err)
	}
	if st := waitEnded(t, tn.malloryRuns, "mallory-run"); st.GetStatus() != toolfleetv1.RunStatus_RUN_STATUS_COMPLETED {
		t.Fatalf("mallory's run: %v; want COMPLETED", st)
	}

	// The program's values are freed with it.
	values := blobCounter(ctx, t, tn.natsURL)
	if values(child) == 0 {
		t.Fatal("alice's code-mode program stored no values by reference")
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		held, _, err = tn.o.Runs.Store.Held(ctx, "alice")
		if err != nil {
			t.Fatal(err)
		}
		n := values(child)
		if held == 0 && n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a minute after alice's run ended she holds %d bytes and her program %d values; want them freed after 15 s", held, n)
		}
	}
}

// fillValues stores values of 200,000 characters through a tool (input and
// result by reference), and smaller ones once a call fails, until the store
// takes none over the inline size: a tenant filling the store to the brim.
const fillValues = `
size = 200000
n = 0
for i in range(args["calls"]):
    r = JSONQuery_Query(document={"s": "x" * size, "i": i}, query=".s")
    n += 1
    if not r.ok:
        if size < 20000:
            break
        size = size // 4
result = {"calls": n}
`

// TestBlobStoreReserve: program values never take the last eighth of the run
// blob store (runstore.ProgramReserveShare). With an 8 MiB store and no
// per-principal quota, mallory's program of 400 KB calls (fillValues) fills
// the store up to the reserve and ends on the storage_quota limit, saying the
// shared store is full; her next program is refused at start (UNAVAILABLE: try later). Alice's
// StartRun, whose input is a blob, and her run's first turn still succeed.
// Without the reserve mallory's values fill the store: her program cannot
// store its next value, and alice's start is refused as the store is full.
func TestBlobStoreReserve(t *testing.T) {
	t.Parallel()
	models := agent.NewResolver()
	models.Register("idle", &agenttest.ByTurn{Turns: []llmtest.ScriptTurn{llmtest.SayText("ok")}})
	tn := startTenantsAt(t, true, "blob-reserve-test", models, func(c *runner.Config) {
		c.PrincipalMaxBytes = -1 // no quota: the reserve alone keeps room for runs
		c.Assets.Overrides = "toolfleet_run_blobs.max-bytes=8MiB"
	})
	withJSONQuery(t, tn)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	runProgram := func(id string, calls int) (*toolfleetv1.RunProgramResponse, error) {
		t.Helper()
		args, err := structpb.NewStruct(map[string]any{"calls": calls})
		if err != nil {
			t.Fatal(err)
		}
		res, err := tn.malloryPrograms.RunProgram(ctx, connect.NewRequest(&toolfleetv1.RunProgramRequest{ProgramId: id, Wait: true,
			Source: fillValues, Args: args, Tools: []string{"JSONQuery.Query@1"},
			Limits: &toolfleetv1.ProgramLimits{Deadline: durationpb.New(45 * time.Second)}}))
		if err != nil {
			return nil, err
		}
		return res.Msg, nil
	}

	res, err := runProgram("mallory-filler", 40)
	if err != nil {
		t.Fatal(err)
	}
	pe := res.GetProgramError()
	if pe.GetLimit() != "storage_quota" || !strings.Contains(pe.GetMessage(), "shared store for program values is full") {
		t.Errorf("mallory's program of 40 calls of 400 KB in an 8 MiB store: %v; want it ended on limit storage_quota, the shared store full", res)
	}
	if n := res.GetToolCalls(); n < 12 || n > 20 {
		t.Errorf("mallory's program made %d calls of 400 KB before the reserve of an 8 MiB store; want 12 to 20 (about 7 MiB)", n)
	}
	if _, err := runProgram("mallory-again", 1); connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "full") {
		t.Errorf("mallory's next program with the store full up to the reserve: %v; want UNAVAILABLE, the store full", err)
	}

	// Alice's start stores her 64 KiB input as a blob, her first turn
	// writes the transcript: both succeed.
	if _, err := tn.aliceRuns.StartRun(ctx, connect.NewRequest(&toolfleetv1.StartRunRequest{RunId: "alice-run", Model: "scripted:idle",
		Messages: []*toolfleetv1.Message{llm.User(strings.Repeat("a", 64<<10))}, IdleTimeout: durationpb.New(-time.Second)})); err != nil {
		t.Fatalf("alice's StartRun with mallory's values up to the reserve: %v", err)
	}
	if st := waitEnded(t, tn.aliceRuns, "alice-run"); st.GetStatus() != toolfleetv1.RunStatus_RUN_STATUS_COMPLETED || st.GetAnswer() != "ok" {
		t.Fatalf("alice's run: %v; want COMPLETED, answering ok", st)
	}
}

// smallCalls makes args["calls"] calls of a 1,000-character value: each
// publishes events of about a kilobyte (the call's input, its result).
const smallCalls = `
doc = "e" * 1000
for i in range(args["calls"]):
    r = JSONQuery_Query(document={"s": doc, "i": i}, query=".i")
    if not r.ok:
        fail("call", i, r.error.message)
result = {"calls": args["calls"]}
`

// TestEventQuota: the run event stream drops its oldest events when full,
// so each principal's events are bounded (Quota.MaxEventBytes, here 32 KiB):
// every stored event counts against its run's or program's owner. Mallory's
// program of 100 calls, each publishing about a kilobyte of events, ends on
// the storage_quota limit once her events hold the bound, and her next
// StartRun is refused in her terms; alice's run starts and completes, and
// her events are counted apart. Without the count mallory's program makes
// all its calls and her events count nothing.
func TestEventQuota(t *testing.T) {
	t.Parallel()
	models := agent.NewResolver()
	models.Register("idle", &agenttest.ByTurn{Turns: []llmtest.ScriptTurn{llmtest.SayText("ok")}})
	tn := startTenantsAt(t, true, "event-quota-test", models, func(c *runner.Config) {
		c.PrincipalMaxEventBytes = 32 << 10
	})
	withJSONQuery(t, tn)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()

	args, err := structpb.NewStruct(map[string]any{"calls": 100})
	if err != nil {
		t.Fatal(err)
	}
	res, err := tn.malloryPrograms.RunProgram(ctx, connect.NewRequest(&toolfleetv1.RunProgramRequest{ProgramId: "mallory-flood", Wait: true,
		Source: smallCalls, Args: args, Tools: []string{"JSONQuery.Query@1"}}))
	if err != nil {
		t.Fatal(err)
	}
	pe := res.Msg.GetProgramError()
	if pe.GetLimit() != "storage_quota" || !strings.Contains(pe.GetMessage(), "events") {
		t.Errorf("mallory's program of 100 calls against a 32 KiB event bound: %v; want it ended on limit storage_quota, naming events", res.Msg)
	}
	if n := res.Msg.GetToolCalls(); n >= 100 {
		t.Errorf("mallory's program made all its %d calls past her event bound", n)
	}
	held, err := tn.o.Runs.Store.HeldEvents(ctx, "mallory")
	if err != nil {
		t.Fatal(err)
	}
	if held < 32<<10 {
		t.Errorf("mallory's events hold %d bytes after her program; want them counted, at least the 32 KiB bound", held)
	}
	_, err = tn.malloryRuns.StartRun(ctx, connect.NewRequest(&toolfleetv1.StartRunRequest{RunId: "mallory-run", Model: "scripted:idle",
		Messages: []*toolfleetv1.Message{llm.User("hi")}, IdleTimeout: durationpb.New(-time.Second)}))
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "events") {
		t.Errorf("mallory's StartRun with her events over the bound: %v; want RESOURCE_EXHAUSTED naming events", err)
	}
	for _, bad := range natsText {
		if err != nil && strings.Contains(strings.ToLower(err.Error()), bad) {
			t.Errorf("the refusal %q holds NATS internals (%q)", err, bad)
		}
	}

	if _, err := tn.aliceRuns.StartRun(ctx, connect.NewRequest(&toolfleetv1.StartRunRequest{RunId: "alice-run", Model: "scripted:idle",
		Messages: []*toolfleetv1.Message{llm.User("hi")}, IdleTimeout: durationpb.New(-time.Second)})); err != nil {
		t.Fatalf("alice's StartRun: %v", err)
	}
	if st := waitEnded(t, tn.aliceRuns, "alice-run"); st.GetStatus() != toolfleetv1.RunStatus_RUN_STATUS_COMPLETED {
		t.Fatalf("alice's run: %v; want COMPLETED", st)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		ev, err := tn.o.Runs.Store.HeldEvents(ctx, "alice")
		if err != nil {
			t.Fatal(err)
		}
		if ev > 0 && ev < 32<<10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("alice's events hold %d bytes; want her run's few events, counted apart from mallory's", ev)
		}
	}
}
