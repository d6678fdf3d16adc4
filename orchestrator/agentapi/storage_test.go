package agentapi_test

import (
	"encoding/base64"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.temporal.io/api/enums/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/gen/toolfleet/v1/toolfleetv1connect"
	"github.com/toolfleet/toolfleet/orchestrator/agent"
	"github.com/toolfleet/toolfleet/orchestrator/agent/agenttest"
	"github.com/toolfleet/toolfleet/orchestrator/runner"
	"github.com/toolfleet/toolfleet/orchestrator/runstore"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall"
	"github.com/toolfleet/toolfleet/sdk/jsassets"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/llmtest"
)

const storageScopes = "runs:start,runs:read,runs:approve,runs:cancel,tools:call,calculator:use"

// runsAs is an AgentService client of subject.
func (tn *tenants) runsAs(subject string) toolfleetv1connect.AgentServiceClient {
	return toolfleetv1connect.NewAgentServiceClient(http.DefaultClient, tn.runsURL, as(subject+":"+storageScopes))
}

// TestQuotaRefusesTheFiller is issue 21 §5 as a tenant filling the stores
// tries it: mallory starts large runs until its quota refuses one with
// RESOURCE_EXHAUSTED and a message it can act on; the refused start stores
// nothing; eve, who starts many small runs, is refused by the run count; and
// alice, whose run was open all along, is unaffected: she continues it and
// starts another.
func TestQuotaRefusesTheFiller(t *testing.T) {
	t.Parallel()
	models := agent.NewResolver()
	models.Register("idle", &agenttest.ByTurn{Turns: []llmtest.ScriptTurn{llmtest.SayText("ok"), llmtest.SayText("again")}})
	tn := startTenants(t, "quota-test", models, func(c *runner.Config) {
		c.PrincipalMaxBytes = 200 << 10
		c.PrincipalMaxRuns = 6
	})
	ctx := t.Context()
	start := func(c toolfleetv1connect.AgentServiceClient, id, text string) error {
		_, err := c.StartRun(ctx, connect.NewRequest(&toolfleetv1.StartRunRequest{RunId: id, Model: "scripted:idle",
			Messages: []*toolfleetv1.Message{llm.User(text)}, IdleTimeout: durationpb.New(time.Minute)}))
		return err
	}
	if err := start(tn.aliceRuns, "alice-victim", "hello"); err != nil {
		t.Fatal(err)
	}

	big := strings.Repeat("m", 60<<10)
	var refused error
	n := 0
	for ; n < 10; n++ {
		id := "mallory-" + string(rune('a'+n))
		if err := start(tn.malloryRuns, id, big+string(rune('a'+n))); err != nil {
			refused = err
			break
		}
		// What a run writes as it runs (its transcript holds the input
		// again) counts once written: wait for it, so each start is
		// measured against everything the earlier ones hold.
		waitStatus(t, tn.malloryRuns, id, toolfleetv1.RunStatus_RUN_STATUS_COMPLETED)
	}
	if connect.CodeOf(refused) != connect.CodeResourceExhausted {
		t.Fatalf("mallory's starts of 60 KiB against a 200 KiB quota: %d started, then %v; want RESOURCE_EXHAUSTED", n, refused)
	}
	// A run of a 60 KiB input holds it twice (the input, and the transcript's
	// copy): the first holds ~120 KiB, the second is admitted (120 + 60 ≤
	// 200), the third is not (240 + 60 > 200).
	if n != 2 {
		t.Errorf("%d starts of 60 KiB fit a 200 KiB quota; want 2", n)
	}
	for _, want := range []string{"quota", "your runs hold", "after each run closes"} {
		if !strings.Contains(refused.Error(), want) {
			t.Errorf("the refusal %q does not say %q", refused.Error(), want)
		}
	}
	if strings.Contains(refused.Error(), "alice") {
		t.Errorf("the refusal names another principal: %v", refused)
	}
	// The refused start stored nothing for its id.
	if _, err := tn.o.Runs.Principal(ctx, "mallory-"+string(rune('a'+n))); !errors.Is(err, agent.ErrNotFound) {
		t.Errorf("the refused run has a record: %v", err)
	}
	held, runs, err := tn.o.Runs.Store.Held(ctx, "mallory")
	if err != nil {
		t.Fatal(err)
	}
	// Admission refuses once what is held leaves no room; what admitted runs
	// write as they run is counted but never stops them (docs/operations.md,
	// "Quotas"), so the last admitted run may take the holding past the
	// quota by its own writes, and by no more.
	if held+60<<10 <= 200<<10 || held > 200<<10+2*(64<<10) || runs != n {
		t.Errorf("mallory holds %d bytes in %d runs; want more than the quota less one start, at most the quota plus one run's writes, in %d runs", held, runs, n)
	}
	// A message to its own run is refused the same way.
	if _, err := tn.malloryRuns.SendMessage(ctx, connect.NewRequest(&toolfleetv1.SendMessageRequest{RunId: "mallory-a",
		Message: llm.User(big)})); connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Errorf("mallory's large message over its quota: %v, want RESOURCE_EXHAUSTED", err)
	}

	// eve starts small runs: the run count stops her at six.
	eve := tn.runsAs("eve")
	var eveErr error
	m := 0
	for ; m < 10 && eveErr == nil; m++ {
		eveErr = start(eve, "eve-"+string(rune('a'+m)), "hi")
	}
	if connect.CodeOf(eveErr) != connect.CodeResourceExhausted || m != 7 {
		t.Errorf("eve's small starts: refused at %d with %v; want the 7th refused with RESOURCE_EXHAUSTED", m, eveErr)
	}

	// alice is unaffected: her run goes on and she starts another.
	waitStatus(t, tn.aliceRuns, "alice-victim", toolfleetv1.RunStatus_RUN_STATUS_COMPLETED)
	if _, err := tn.aliceRuns.SendMessage(ctx, connect.NewRequest(&toolfleetv1.SendMessageRequest{RunId: "alice-victim",
		Message: llm.User("more")})); err != nil {
		t.Errorf("alice's message to her run: %v", err)
	}
	if err := start(tn.aliceRuns, "alice-second", big); err != nil {
		t.Errorf("alice's new start: %v", err)
	}
}

// waitStatus waits until run id has status want (or fails after a minute).
func waitStatus(t *testing.T, c toolfleetv1connect.AgentServiceClient, id string, want toolfleetv1.RunStatus) *toolfleetv1.GetRunResponse {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		st, err := c.GetRun(t.Context(), connect.NewRequest(&toolfleetv1.GetRunRequest{RunId: id}))
		if err == nil && st.Msg.GetStatus() == want {
			return st.Msg
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s: %v, %v; want %s", id, st, err, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestClosedRunDataExpires: with a retention of 4 s, a run that closed has
// its transcript, description, blobs, events and quota entry freed by the
// reaper, while alice's run that is still open keeps all of it across the
// timers that fire meanwhile.
func TestClosedRunDataExpires(t *testing.T) {
	t.Parallel()
	models := agent.NewResolver()
	models.Register("once", &agenttest.ByTurn{Turns: []llmtest.ScriptTurn{
		llmtest.CallTools("", llm.CallPart("m", "Calculator_Multiply", map[string]any{"a": 6, "b": 7})), llmtest.SayText("42")}})
	models.Register("idle", &agenttest.ByTurn{Turns: []llmtest.ScriptTurn{llmtest.SayText("ok")}})
	tn := startTenants(t, "retention-test", models, func(c *runner.Config) {
		c.Assets = jsassets.Config{Overrides: "toolfleet_runs.max-age=4s"}
	})
	ctx := t.Context()
	nc, err := nats.Connect(tn.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tn.aliceRuns.StartRun(ctx, connect.NewRequest(&toolfleetv1.StartRunRequest{RunId: "alice-open", Model: "scripted:idle",
		Messages: []*toolfleetv1.Message{llm.User("stay")}, IdleTimeout: durationpb.New(10 * time.Minute)})); err != nil {
		t.Fatal(err)
	}
	blobs, err := js.ObjectStore(ctx, runstore.DefaultBlobBucket)
	if err != nil {
		t.Fatal(err)
	}
	events, err := js.Stream(ctx, toolcall.DefaultEventStream)
	if err != nil {
		t.Fatal(err)
	}
	// What each run holds: transcript messages, blobs, events.
	holds := func(runID string) (msgs, nblobs int, nevents uint64) {
		t.Helper()
		tr, err := tn.o.Runs.Transcript(ctx, runID)
		if err != nil {
			t.Fatal(err)
		}
		infos, err := blobs.List(ctx)
		if err != nil && !errors.Is(err, jetstream.ErrNoObjectsFound) {
			t.Fatal(err)
		}
		for _, i := range infos {
			if strings.HasPrefix(i.Name, runID+"/") {
				nblobs++
			}
		}
		info, err := events.Info(ctx, jetstream.WithSubjectFilter(toolcall.EventSubjectPrefix+runID+".>"))
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range info.State.Subjects {
			nevents += n
		}
		return len(tr), nblobs, nevents
	}
	if _, err := tn.malloryRuns.StartRun(ctx, connect.NewRequest(&toolfleetv1.StartRunRequest{RunId: "closing", Model: "scripted:once",
		Tools: []string{"Calculator.Multiply"}, Messages: []*toolfleetv1.Message{llm.User("6*7")},
		IdleTimeout: durationpb.New(-time.Second)})); err != nil {
		t.Fatal(err)
	}
	// Right after the start (the retention counts from the close), the run
	// holds its record and its input blob.
	if _, err := tn.o.Runs.Principal(ctx, "closing"); err != nil {
		t.Fatalf("the run's record after its start: %v", err)
	}
	if _, runs, err := tn.o.Runs.Store.Held(ctx, "mallory"); err != nil || runs != 1 {
		t.Fatalf("mallory's quota after its start: %d runs (%v), want 1", runs, err)
	}
	if _, b, _ := holds("closing"); b < 1 {
		t.Fatalf("the closing run holds %d blobs after its start; want its input", b)
	}
	waitStatus(t, tn.aliceRuns, "alice-open", toolfleetv1.RunStatus_RUN_STATUS_COMPLETED)
	// The workflow closes at once (idle timeout < 0); wait for Temporal to say so.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		d, err := tn.o.Runs.Temporal.DescribeWorkflowExecution(ctx, "closing", "")
		if err == nil && d.GetWorkflowExecutionInfo().GetStatus() != enums.WORKFLOW_EXECUTION_STATUS_RUNNING {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the closing run's workflow did not close: %v", err)
		}
	}
	// Freed 4 s after it closed (the reaper's timer, re-set to the rest).
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		_, err := tn.o.Runs.Principal(ctx, "closing")
		m, b, e := holds("closing")
		if errors.Is(err, agent.ErrNotFound) && m == 0 && b == 0 && e == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the closed run still holds %d messages, %d blobs, %d events (record: %v)", m, b, e, err)
		}
	}
	if _, runs, err := tn.o.Runs.Store.Held(ctx, "mallory"); err != nil || runs != 0 {
		t.Errorf("mallory's quota after its run was freed: %d runs (%v), want 0", runs, err)
	}
	if _, err := tn.malloryRuns.GetRun(ctx, connect.NewRequest(&toolfleetv1.GetRunRequest{RunId: "closing"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("GetRun of a freed run: %v, want NotFound", err)
	}
	// alice's open run kept everything (its timer fired and was set again).
	if m, b, e := holds("alice-open"); m < 2 || b < 2 || e < 2 {
		t.Errorf("the open run holds %d messages, %d blobs, %d events; want all it had", m, b, e)
	}
	if _, err := tn.aliceRuns.SendMessage(ctx, connect.NewRequest(&toolfleetv1.SendMessageRequest{RunId: "alice-open",
		Message: llm.User("still here")})); err != nil {
		t.Errorf("alice's open run after the other was freed: %v", err)
	}
}

// TestHistoryContentNone: with --history-content=none no byte of a run's
// content (the user's message, the model's text, a tool's result, the
// answer) is in its Temporal history, GetRun still returns the whole answer
// from the transcript, and code mode is refused; the same run with the
// default previews has them in history (so the check can fail).
func TestHistoryContentNone(t *testing.T) {
	t.Parallel()
	// The tool's result is 123457², which only the call computes.
	const secretArg, secretAnswer, product = 123457, "the-answer-is-xyzzy-plugh", "15241630849"
	for _, mode := range []string{agent.HistoryContentNone, agent.HistoryContentPreviews} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			models := agent.NewResolver()
			models.Register("secret", &agenttest.ByTurn{Turns: []llmtest.ScriptTurn{
				llmtest.CallTools("thinking-aloud-frobnicate", llm.CallPart("m", "Calculator_Multiply", map[string]any{"a": secretArg, "b": secretArg})),
				llmtest.SayText(secretAnswer)}})
			tn := startTenants(t, "history-"+mode, models, func(c *runner.Config) { c.HistoryContent = mode })
			ctx := t.Context()
			if _, err := tn.aliceRuns.StartRun(ctx, connect.NewRequest(&toolfleetv1.StartRunRequest{RunId: "secret-run", Model: "scripted:secret",
				Tools: []string{"Calculator.Multiply"}, SystemPrompt: "system-prompt-quux",
				Messages: []*toolfleetv1.Message{llm.User("user-says-wibble")}, IdleTimeout: durationpb.New(-time.Second)})); err != nil {
				t.Fatal(err)
			}
			st := waitStatus(t, tn.aliceRuns, "secret-run", toolfleetv1.RunStatus_RUN_STATUS_COMPLETED)
			if st.GetAnswer() != secretAnswer {
				t.Errorf("GetRun's answer: %q, want %q", st.GetAnswer(), secretAnswer)
			}
			var history strings.Builder
			iter := tn.o.Runs.Temporal.GetWorkflowHistory(ctx, "secret-run", "", false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
			for iter.HasNext() {
				ev, err := iter.Next()
				if err != nil {
					t.Fatal(err)
				}
				b, err := protojson.Marshal(ev)
				if err != nil {
					t.Fatal(err)
				}
				history.Write(b)
			}
			text := decodedPayloads(history.String())
			secrets := []string{secretAnswer, "thinking-aloud-frobnicate", product, "user-says-wibble", "system-prompt-quux"}
			found := 0
			for _, s := range secrets {
				if strings.Contains(text, s) {
					found++
					if mode == agent.HistoryContentNone {
						t.Errorf("history holds %q", s)
					}
				}
			}
			if mode == agent.HistoryContentPreviews && found < 3 {
				t.Errorf("with previews, history holds %d of the model's text, the tool's result and the answer; want all 3", found)
			}
			if mode == agent.HistoryContentNone {
				if !strings.Contains(text, "text_sha256") || !strings.Contains(text, "content_sha256") {
					t.Error("history has no digests in place of the previews")
				}
				_, err := tn.aliceRuns.StartRun(ctx, connect.NewRequest(&toolfleetv1.StartRunRequest{Model: "scripted:secret",
					Tools: []string{"Calculator.Multiply"}, CodeMode: true, Messages: []*toolfleetv1.Message{llm.User("x")}}))
				if connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "history-content") {
					t.Errorf("a code-mode start with no content in history: %v, want FAILED_PRECONDITION naming the setting", err)
				}
			}
		})
	}
}

var payloadData = regexp.MustCompile(`"data":\s*"([A-Za-z0-9+/=]*)"`)

// decodedPayloads is the protojson of history events with every payload's
// data (base64 in protojson) decoded and appended, so a search sees the
// JSON that Temporal stored.
func decodedPayloads(history string) string {
	var b strings.Builder
	b.WriteString(history)
	for _, m := range payloadData.FindAllStringSubmatch(history, -1) {
		if d, err := base64.StdEncoding.DecodeString(m[1]); err == nil {
			b.WriteString("\n")
			b.Write(d)
		}
	}
	return b.String()
}
