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
	jsonqv1 "github.com/toolfleet/toolfleet/gen/tools/jsonq/v1"
	"github.com/toolfleet/toolfleet/orchestrator/agent"
	"github.com/toolfleet/toolfleet/orchestrator/agent/agenttest"
	"github.com/toolfleet/toolfleet/orchestrator/runner"
	"github.com/toolfleet/toolfleet/orchestrator/runstore"
	"github.com/toolfleet/toolfleet/sdk/jsassets"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/llmtest"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/workers/jsonq/jsonq"
)

// echoValues sends a value of 200,000 characters through a tool calls times:
// each call stores its input and its result by reference (about 400 KB).
const echoValues = `
big = "x" * 200000
for i in range(args["calls"]):
    r = JSONQuery_Query(document={"s": big, "i": i}, query=".s")
    if not r.ok:
        fail("call", i, r.error.message)
result = {"calls": args["calls"]}
`

// nats internals a caller must never read (issue 32 item 8).
var natsText = []string{"err_code", "maximum bytes", "nats:", "jetstream", "10077"}

// TestProgramValuesQuota is issue 32 items 6 and 8: program values count
// against their owner's byte quota, the same record runs are admitted by.
// Alice's program, storing 400 KB per call against a 1 MiB quota, ends with a
// storage_quota limit error in her terms, and her next start is refused the
// same way (no NATS text); Mallory's run and program then start and finish;
// once Alice's program has been closed for the retention (3 s here), the
// reaper frees its values and her quota, and she starts again.
func TestProgramValuesQuota(t *testing.T) {
	t.Parallel()
	models := agent.NewResolver()
	models.Register("idle", &agenttest.ByTurn{Turns: []llmtest.ScriptTurn{llmtest.SayText("ok")}})
	tn := startTenants(t, "program-quota-test", models, func(c *runner.Config) {
		c.PrincipalMaxBytes = 1 << 20
		c.Assets = jsassets.Config{Overrides: "toolfleet_runs.max-age=3s"}
	})
	tn.fleet.AddWorker(t, func(w *tool.Worker) {
		jsonqv1.RegisterJSONQueryServiceServer(w, jsonq.New(jsonq.Config{MaxOutputBytes: 2 << 20}))
	})
	tn.fleet.WaitTool(t, "JSONQuery.Query@1")
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	runProgram := func(alice bool, id string, calls int) (*toolfleetv1.RunProgramResponse, error) {
		t.Helper()
		args, err := structpb.NewStruct(map[string]any{"calls": calls})
		if err != nil {
			t.Fatal(err)
		}
		c := tn.malloryPrograms
		if alice {
			c = tn.alicePrograms
		}
		res, err := c.RunProgram(ctx, connect.NewRequest(&toolfleetv1.RunProgramRequest{ProgramId: id, Wait: true,
			Source: echoValues, Args: args, Tools: []string{"JSONQuery.Query@1"}}))
		if err != nil {
			return nil, err
		}
		return res.Msg, nil
	}
	clean := func(what, msg string) {
		t.Helper()
		for _, bad := range natsText {
			if strings.Contains(strings.ToLower(msg), bad) {
				t.Errorf("%s %q holds NATS internals (%q)", what, msg, bad)
			}
		}
	}

	// Alice's program passes her quota: it ends with a limit error.
	res, err := runProgram(true, "alice-filler", 12)
	if err != nil {
		t.Fatal(err)
	}
	pe := res.GetProgramError()
	if res.GetStatus() != toolfleetv1.ProgramStatus_PROGRAM_STATUS_FAILED || pe.GetKind() != "limit" || pe.GetLimit() != "storage_quota" {
		t.Fatalf("alice's program of 12 calls of 400 KB against a 1 MiB quota: %v; want FAILED on limit %s", res, "storage_quota")
	}
	for _, want := range []string{"storage quota", "bytes", "freed"} {
		if !strings.Contains(pe.GetMessage(), want) {
			t.Errorf("the program's error %q does not say %q", pe.GetMessage(), want)
		}
	}
	clean("the program's error", pe.GetMessage())
	if res.GetToolCalls() < 2 || res.GetToolCalls() > 4 {
		t.Errorf("the program made %d calls of 400 KB within a 1 MiB quota; want 2 to 4", res.GetToolCalls())
	}
	// Her program's values, counted now: the reaper frees them 3 s after
	// the program closed (checked at the end).
	nc, err := nats.Connect(tn.natsURL)
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
	values := func(prefix string) int {
		t.Helper()
		infos, err := blobs.List(ctx)
		if err != nil && !errors.Is(err, jetstream.ErrNoObjectsFound) {
			t.Fatal(err)
		}
		n := 0
		for _, in := range infos {
			if strings.HasPrefix(in.Name, prefix+"/") {
				n++
			}
		}
		return n
	}
	if n := values("alice-filler"); n == 0 {
		t.Fatal("alice's program stored no values by reference")
	}
	held, _, err := tn.o.Runs.Store.Held(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if held < 1<<20 {
		t.Fatalf("alice holds %d bytes after her program; want her program's values, over 1 MiB", held)
	}

	// Her next start is refused before anything runs.
	_, err = runProgram(true, "alice-again", 1)
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "storage quota") {
		t.Fatalf("alice's start over her quota: %v; want RESOURCE_EXHAUSTED naming the storage quota", err)
	}
	clean("the refusal", err.Error())
	if strings.Contains(err.Error(), "mallory") {
		t.Errorf("the refusal names another principal: %v", err)
	}

	// Mallory is not affected: her run and her program start and finish.
	if _, err := tn.malloryRuns.StartRun(ctx, connect.NewRequest(&toolfleetv1.StartRunRequest{RunId: "mallory-run", Model: "scripted:idle",
		Messages: []*toolfleetv1.Message{llm.User(strings.Repeat("m", 20<<10))}, IdleTimeout: durationpb.New(time.Minute)})); err != nil {
		t.Fatalf("mallory's StartRun: %v", err)
	}
	if res, err := runProgram(false, "mallory-program", 1); err != nil || res.GetStatus() != toolfleetv1.ProgramStatus_PROGRAM_STATUS_COMPLETED {
		t.Fatalf("mallory's program: %v, %v; want COMPLETED", res, err)
	}

	// Once alice's program has been closed for the retention, its values
	// and her quota are freed.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		held, _, err = tn.o.Runs.Store.Held(ctx, "alice")
		if err != nil {
			t.Fatal(err)
		}
		n := values("alice-filler")
		if held == 0 && n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a minute after alice's program ended she holds %d bytes and %d values; want them freed after 3 s", held, n)
		}
	}
	if res, err := runProgram(true, "alice-later", 1); err != nil || res.GetStatus() != toolfleetv1.ProgramStatus_PROGRAM_STATUS_COMPLETED {
		t.Fatalf("alice's program once her values were freed: %v, %v; want COMPLETED", res, err)
	}
}
