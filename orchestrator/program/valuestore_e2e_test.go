package program_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	commonpb "go.temporal.io/api/common/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/proxy"
	sdkpb "go.temporal.io/api/sdk/v1"
	tclient "go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolfleet/toolfleet/e2e/programstack"
	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	jsonqv1 "github.com/toolfleet/toolfleet/gen/tools/jsonq/v1"
	"github.com/toolfleet/toolfleet/orchestrator/agent"
	"github.com/toolfleet/toolfleet/orchestrator/program"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/workers/jsonq/jsonq"
)

// Temporal's default limits a program's values used to run into: one payload
// of 2 MB, a history of 50 MB.
const (
	temporalPayloadLimit = 2 << 20
	temporalHistoryLimit = 50 << 20
)

// refs are the external-storage claims in a history, and inline is the size of
// the payloads kept in it.
func refs(t *testing.T, h *historypb.History) (claims []map[string]string, inline int) {
	t.Helper()
	err := proxy.VisitPayloads(t.Context(), h, proxy.VisitPayloadsOptions{
		Visitor: func(_ *proxy.VisitPayloadsContext, ps []*commonpb.Payload) ([]*commonpb.Payload, error) {
			for _, p := range ps {
				inline += proto.Size(p)
				if len(p.GetExternalPayloads()) == 0 {
					continue
				}
				ref := &sdkpb.ExternalStorageReference{}
				if err := protojson.Unmarshal(p.GetData(), ref); err != nil {
					return nil, err
				}
				claims = append(claims, ref.GetClaimData())
			}
			return ps, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return claims, inline
}

// addJSONQuery adds a jq worker whose results may reach max_value_bytes. It
// announces itself every 2 s (ttl 6 s), not every 100 ms like the fleet's
// test workers: moving megabytes under the race detector on a busy machine
// stalls it longer than 300 ms, and its tool would vanish mid-program.
func addJSONQuery(t *testing.T, s *stack) {
	t.Helper()
	w, err := tool.NewWorker(tool.Config{Name: "jsonq", NATSURL: s.fleet.NATSURL, AnnounceInterval: 2 * time.Second,
		ShutdownTimeout: 2 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	jsonqv1.RegisterJSONQueryServiceServer(w, jsonq.New(jsonq.Config{MaxOutputBytes: 2 << 20}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("the jq worker did not stop")
		}
	})
	select {
	case <-w.Ready():
	case err := <-done:
		t.Fatalf("jq worker: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the jq worker is not ready")
	}
	s.fleet.WaitTool(t, "JSONQuery.Query@1")
}

// bigValues sends a string of n characters through a tool calls times (as its
// input and back as its result) and returns a result of n characters too.
const bigValues = `
big = "x" * args["n"]
moved = 0
for i in range(args["calls"]):
    r = JSONQuery_Query(document={"s": big, "i": i}, query=".s")
    if not r.ok:
        fail("call", i, r.error.message)
    moved += len(r.value["results"][0]) * 2
result = {"moved": moved, "tail": big[:args["n"] - 64]}
`

// A program can reach the documented ceilings of max_value_bytes and
// max_result_bytes on every call, and move more than Temporal's history limit
// through its tools, because values over the inline size go to the blob store
// and history holds references: the program completes, its history stays
// small, and it replays from the references. (Under the race detector, which
// makes moving 64 MB take minutes on a small machine, it moves 8 MB and
// checks the history's growth per call instead.)
func TestValuesPastHistoryLimits(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	addJSONQuery(t, s)
	const n = 1_000_000 // 1 MB values in and out, and a result of 1 MB
	calls := 32         // 64 MB through the program
	if raceOn {
		calls = 4
	}
	in := program.Input{ProgramID: "values-1", Source: bigValues, ArgsJSON: fmt.Sprintf(`{"n": %d, "calls": %d}`, n, calls),
		Tools: []string{"JSONQuery.Query@1"},
		Limits: program.Limits{MaxValueBytes: program.MaxValueBytes, MaxResultBytes: program.MaxResultBytes,
			MaxMemoryBytes: program.MaxMemoryBytes, MaxToolCalls: calls}}
	began := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	run, err := s.temporal.ExecuteWorkflow(ctx, tclient.StartWorkflowOptions{ID: in.ProgramID, TaskQueue: s.queue}, program.WorkflowName, in)
	if err != nil {
		t.Fatal(err)
	}
	var out program.Output
	if err := run.Get(ctx, &out); err != nil {
		t.Fatalf("program: %v", err)
	}
	t.Logf("the program took %s", time.Since(began).Round(time.Millisecond))
	if want := fmt.Sprintf(`{"moved":%d,`, 2*n*calls); !strings.HasPrefix(out.ResultJSON, want) || len(out.ResultJSON) < n-64 {
		t.Fatalf("result %.80s… (%d bytes), want %s… of about %d bytes", out.ResultJSON, len(out.ResultJSON), want, n)
	}
	if moved := 2 * n * calls; moved <= temporalHistoryLimit && !raceOn {
		t.Fatalf("the test moves %d bytes, not past Temporal's history limit", moved)
	}

	hist := history(t, s.temporal, in.ProgramID)
	claims, inline := refs(t, hist)
	size := proto.Size(hist)
	t.Logf("%d calls of %d-byte values: history of %d events, %d bytes (%d in payloads), %d values by reference",
		calls, n, len(hist.GetEvents()), size, inline, len(claims))
	// Every call's input and result, the program's input is small; plus the result.
	if len(claims) < 2*calls+1 {
		t.Fatalf("%d values by reference, want at least %d", len(claims), 2*calls+1)
	}
	if size > temporalPayloadLimit {
		t.Fatalf("history of %d bytes: the values are in it", size)
	}
	// What a call adds to history is a reference, whatever its values: at
	// this rate the ceiling of calls stays far below the history limit.
	if perCall := size / calls; perCall > 4<<10 || program.MaxToolCalls*perCall > temporalHistoryLimit/2 {
		t.Fatalf("each call of 1 MB values adds %d bytes to history", perCall)
	}
	if b, _ := protojson.Marshal(hist); strings.Contains(string(b), strings.Repeat("x", 1000)) {
		t.Fatal("the history holds a value")
	}
	for _, c := range claims {
		if c["ref"] == "" || c["size"] == "" || len(c["sha256"]) != 64 || c["workflow"] != in.ProgramID {
			t.Fatalf("claim %v: want ref, size, sha256 and the program", c)
		}
	}
	if err := replayer(s.store).ReplayWorkflowHistory(nil, hist); err != nil {
		t.Fatalf("replay from references: %v", err)
	}
}

// With NoContentInHistory, nothing a program reads, computes or prints is in
// its history: tool inputs and results, args, prints, the result and a
// failure's message go by reference or name only the error's kind; the
// program's owner still reads the result and the whole error.
func TestNoContentInHistory(t *testing.T) {
	t.Parallel()
	s := startStack(t, program.Config{NoContentInHistory: true})
	c, _ := programstack.Serve(t, s.ps)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	const secret = "SECRET-7f3a9"
	src := `
print("the secret is", args["secret"])
r = Calculator_Add(a=40, b=2)
result = {"secret": args["secret"], "sum": r.value["result"]}
`
	args := fmt.Sprintf(`{"secret": %q}`, secret)
	res, err := c.RunProgram(ctx, programstack.As("alice", &toolfleetv1.RunProgramRequest{ProgramId: "quiet-ok", Wait: true,
		Source: src, Args: structOf(t, args), Tools: []string{"Calculator.Add"}}))
	if err != nil {
		t.Fatal(err)
	}
	if m := res.Msg; m.GetStatus() != toolfleetv1.ProgramStatus_PROGRAM_STATUS_COMPLETED ||
		m.GetResult().GetStructValue().GetFields()["secret"].GetStringValue() != secret {
		t.Fatalf("RunProgram = %v, want COMPLETED with the secret in the result", m)
	}
	res, err = c.RunProgram(ctx, programstack.As("alice", &toolfleetv1.RunProgramRequest{ProgramId: "quiet-fail", Wait: true,
		Source: "fail('the secret is', args['secret'])\n", Args: structOf(t, args)}))
	if err != nil {
		t.Fatal(err)
	}
	if pe := res.Msg.GetProgramError(); pe.GetKind() != "fail" || !strings.Contains(pe.GetMessage(), secret) {
		t.Fatalf("RunProgram = %v, want a fail error with its message", res.Msg)
	}
	for _, id := range []string{"quiet-ok", "quiet-fail"} {
		hist := history(t, s.temporal, id)
		b, err := protojson.Marshal(hist)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), secret) || strings.Contains(string(b), "the secret is") {
			t.Errorf("%s: the history holds content", id)
		}
		if claims, _ := refs(t, hist); len(claims) == 0 {
			t.Errorf("%s: no value by reference", id)
		}
		if err := replayer(s.store).ReplayWorkflowHistory(nil, hist); err != nil {
			t.Errorf("%s: replay: %v", id, err)
		}
		if id == "quiet-ok" && os.Getenv("TOOLFLEET_RECORD_HISTORY") == "1" {
			recordRefs(t, s, history(t, s.temporal, id)) // a replay resolves the references in place
		}
	}
}

// refsDir holds a recorded history whose values are all references, and the
// blobs they name (TestReplayRefs).
var refsDir = filepath.Join("testdata", "refs")

// recordRefs writes hist and the blobs of its references to refsDir.
func recordRefs(t *testing.T, s *stack, hist *historypb.History) {
	t.Helper()
	claims, _ := refs(t, hist)
	blobs := map[string][]byte{}
	for _, c := range claims {
		b, err := s.store.Blob(t.Context(), c["ref"])
		if err != nil {
			t.Fatal(err)
		}
		blobs[c["ref"]] = b
	}
	hb, err := protojson.MarshalOptions{Indent: "  "}.Marshal(hist)
	if err != nil {
		t.Fatal(err)
	}
	bb, err := json.MarshalIndent(blobs, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(refsDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(refsDir, "history.json"), hb, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(refsDir, "blobs.json"), bb, 0o644); err != nil {
		t.Fatal(err)
	}
}

// recordedBlobs are the blobs recorded with a history.
type recordedBlobs map[string][]byte

func (r recordedBlobs) PutBlob(context.Context, string, []byte) (string, error) {
	return "", errors.New("recorded blobs are read-only")
}

func (r recordedBlobs) Blob(_ context.Context, ref string) ([]byte, error) {
	b, ok := r[ref]
	if !ok {
		return nil, fmt.Errorf("%w: %s", agent.ErrNotFound, ref)
	}
	return b, nil
}

// A history recorded with every value by reference (NoContentInHistory)
// replays on the current code from the blobs its references name, and not
// without them. Re-record with TOOLFLEET_RECORD_HISTORY=1 go test -run
// TestNoContentInHistory ./orchestrator/program.
func TestReplayRefs(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join(refsDir, "blobs.json"))
	if err != nil {
		t.Fatal(err)
	}
	var blobs recordedBlobs
	if err := json.Unmarshal(b, &blobs); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(refsDir, "history.json")
	if err := replayer(blobs).ReplayWorkflowHistoryFromJSONFile(nil, f); err != nil {
		t.Fatalf("replay from the recorded blobs: %v", err)
	}
	if err := replayer(recordedBlobs{}).ReplayWorkflowHistoryFromJSONFile(nil, f); err == nil {
		t.Fatal("the history replayed without its blobs: its values are not references")
	}
}

// A program's stored values belong to it: another principal cannot read the
// program, cannot find its values by their content (the blob names carry a
// random nonce), and a reference moved to another program or altered is
// refused.
func TestValueRefsAreOwned(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	c, _ := programstack.Serve(t, s.ps)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	secret := "alice-secret-" + strings.Repeat("s", 8<<10) // over the inline size
	res, err := c.RunProgram(ctx, programstack.As("alice", &toolfleetv1.RunProgramRequest{ProgramId: "owned-1", Wait: true,
		Source: "result = args['s']\n", Args: structOf(t, fmt.Sprintf(`{"s": %q}`, secret))}))
	if err != nil || res.Msg.GetResult().GetStringValue() != secret {
		t.Fatalf("alice's program = %v, %v, want her value back", res, err)
	}
	if _, err := c.GetProgram(ctx, programstack.As("mallory", &toolfleetv1.GetProgramRequest{ProgramId: "owned-1"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("GetProgram as mallory: %v, want NotFound", err)
	}
	// Mallory's program computing the same value stores it apart.
	if _, err := c.RunProgram(ctx, programstack.As("mallory", &toolfleetv1.RunProgramRequest{ProgramId: "owned-2", Wait: true,
		Source: "result = args['s']\n", Args: structOf(t, fmt.Sprintf(`{"s": %q}`, secret))})); err != nil {
		t.Fatal(err)
	}

	claims, _ := refs(t, history(t, s.temporal, "owned-1"))
	mclaims, _ := refs(t, history(t, s.temporal, "owned-2"))
	if len(claims) == 0 || len(mclaims) == 0 {
		t.Fatalf("references: alice %d, mallory %d; want some of each", len(claims), len(mclaims))
	}
	for _, a := range claims {
		for _, m := range mclaims {
			if a["ref"] == m["ref"] {
				t.Fatalf("two programs share the blob %s", a["ref"])
			}
		}
	}
	// The content address of the value, of its JSON or of the payload
	// names no blob: the names cannot be guessed from a value.
	result := fmt.Sprintf(`{"result_json":%q}`, fmt.Sprintf("%q", secret))
	for _, guess := range []string{secret, fmt.Sprintf("%q", secret), result} {
		sum := sha256.Sum256([]byte(guess))
		if _, err := s.store.Blob(ctx, "sha256-"+hex.EncodeToString(sum[:])); !errors.Is(err, agent.ErrNotFound) {
			t.Fatalf("a blob named by the content's hash: %v, want ErrNotFound", err)
		}
	}
	for _, a := range claims {
		sum := a["sha256"]
		if _, err := s.store.Blob(ctx, "sha256-"+sum); !errors.Is(err, agent.ErrNotFound) {
			t.Fatalf("a blob named by the claim's payload hash: %v, want ErrNotFound", err)
		}
	}

	driver := program.ExternalStorage(s.store, program.Config{}).Drivers[0]
	get := func(claim map[string]string) error {
		_, err := driver.Retrieve(converter.StorageDriverRetrieveContext{Context: ctx},
			[]converter.StorageDriverClaim{{ClaimData: claim}})
		return err
	}
	for _, a := range claims {
		if err := get(a); err != nil {
			t.Fatalf("alice's own claim: %v", err) // the test can tell a refusal
		}
		moved := map[string]string{}
		for k, v := range a {
			moved[k] = v
		}
		moved["workflow"] = "owned-2"
		if err := get(moved); !errors.Is(err, program.ErrBadValue) {
			t.Fatalf("alice's claim moved to mallory's program: %v, want ErrBadValue", err)
		}
		moved["workflow"], moved["sha256"] = a["workflow"], strings.Repeat("0", 64)
		if err := get(moved); !errors.Is(err, program.ErrBadValue) {
			t.Fatalf("a claim with another hash: %v, want ErrBadValue", err)
		}
	}
}

func structOf(t *testing.T, js string) *structpb.Struct {
	t.Helper()
	s := &structpb.Struct{}
	if err := protojson.Unmarshal([]byte(js), s); err != nil {
		t.Fatal(err)
	}
	return s
}

// temporalHistoryEvents is Temporal's default limit.historyCount.error: the
// server ends a workflow whose history passes it.
const temporalHistoryEvents = 51_200

// The documented ceiling of tool calls is one a program can reach: a program
// making max_tool_calls sequential calls (the most history per call, without
// approvals) and max prints stays within Temporal's limit on history events,
// by the history a call really adds.
func TestToolCallCeilingFitsHistory(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	const calls = 16
	events := func(id string, n int) int {
		src := fmt.Sprintf("for i in range(%d):\n    Calculator_Add(a=i, b=1)\nresult = 1\n", n)
		if _, err := s.run(t, program.Input{ProgramID: id, Source: src, Tools: []string{"Calculator.Add"}}); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		return len(history(t, s.temporal, id).GetEvents())
	}
	base, many := events("ceiling-0", 0), events("ceiling-n", calls)
	perCall := float64(many-base) / calls
	worst := base + int(perCall*program.MaxToolCalls+0.5) + program.MaxPrints // a print is one marker
	t.Logf("history: %d events without calls, %.2f per call; %d calls and %d prints: %d events of %d",
		base, perCall, program.MaxToolCalls, program.MaxPrints, worst, temporalHistoryEvents)
	if perCall < 3 {
		t.Fatalf("%.2f events per call: the test does not count calls", perCall)
	}
	if worst > temporalHistoryEvents {
		t.Fatalf("a program at max_tool_calls needs %d history events, over Temporal's %d", worst, temporalHistoryEvents)
	}
}
