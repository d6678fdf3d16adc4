package agent_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	anthropicoption "github.com/anthropics/anthropic-sdk-go/option"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/genai"
	"google.golang.org/protobuf/proto"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/orchestrator/agent"
	"github.com/toolfleet/toolfleet/orchestrator/agent/agenttest"
	"github.com/toolfleet/toolfleet/orchestrator/ids"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/anthropic"
	"github.com/toolfleet/toolfleet/sdk/llm/gemini"
	"github.com/toolfleet/toolfleet/sdk/llm/llmtest"
)

func call(id, name string, args map[string]any) *toolfleetv1.Part {
	return llm.CallPart(id, name, args)
}

// withUsage sets a turn's token usage.
func withUsage(turn llmtest.ScriptTurn, in, out int64) llmtest.ScriptTurn {
	turn.Reply.Usage = &toolfleetv1.Usage{InputTokens: in, OutputTokens: out}
	return turn
}

// checkLast asserts what the model was sent as the last tool result.
func checkLast(turn llmtest.ScriptTurn, isError bool, contains string) llmtest.ScriptTurn {
	turn.Check = func(req *llm.Request) error {
		r := lastResult(req)
		if r == nil || r.GetIsError() != isError || !strings.Contains(r.GetContent(), contains) {
			return fmt.Errorf("last tool result %v, want is_error=%v containing %q", r, isError, contains)
		}
		return nil
	}
	return turn
}

func TestRuns(t *testing.T) {
	t.Parallel()
	e := newEnv(t)

	t.Run("parallel read-only calls and ordered side effects", func(t *testing.T) {
		t.Parallel()
		id := "multi"
		e.start(t, id, agent.RunSpec{Tools: []string{"Calculator.*", "KV.Put", "KV.Delete"}},
			llmtest.CallTools("working", call("c1", "Calculator_Add", map[string]any{"a": 1, "b": 2}),
				call("c2", "Calculator_Multiply", map[string]any{"a": 3, "b": 4}),
				call("c3", "KV_Put", map[string]any{"key": "multi.k", "value": "v"}),
				call("c4", "KV_Delete", map[string]any{"key": "multi.k"})),
			llmtest.SayText("3 and 12"))
		// KV.Delete's contract requires approval: the run asks, a human grants it.
		ev := e.waitEvent(t, id, 1, toolcall.EventApprovalRequested)
		if err := e.runs.Decide(t.Context(), id, toolcall.Decision{CallID: ev.GetCallId(), Approved: true, Approver: "bo"}); err != nil {
			t.Fatal(err)
		}
		st := e.waitEnd(t, id)
		if st.Status != agent.StatusCompleted || st.Turn != 2 || st.ToolCalls != 4 || st.Answer != "3 and 12" {
			t.Fatalf("state %+v, want completed after 2 turns and 4 calls", st)
		}
		rs := results(e.transcript(t, id))
		want := []string{`{"result":3}`, `{"result":12}`, "revision", `"deletedValue":"v"`}
		if len(rs) != len(want) {
			t.Fatalf("%d results, want %d", len(rs), len(want))
		}
		for i, r := range rs {
			if r.GetIsError() || !strings.Contains(r.GetContent(), want[i]) {
				t.Errorf("result %d = %q (error %v), want a success containing %q (the delete ran after the put)", i, r.GetContent(), r.GetIsError(), want[i])
			}
		}
		if puts, dels := e.kv.counts("multi.k"); puts != 1 || dels != 1 {
			t.Fatalf("KV side effects put=%d delete=%d, want once each", puts, dels)
		}
		e.record(t, id, "multi")
	})

	t.Run("no content in history", func(t *testing.T) {
		t.Parallel()
		id := "nocontent"
		none := *e.runs
		none.HistoryContent = agent.HistoryContentNone
		e.models.Register(id, &agenttest.ByTurn{Turns: []llmtest.ScriptTurn{
			llmtest.CallTools("multiplying privately", call("c1", "Calculator_Multiply", map[string]any{"a": 3, "b": 4})),
			llmtest.SayText("the product is twelve")}})
		spec := agent.RunSpec{Tools: []string{"Calculator.*"}, Model: agent.ModelSpec{Spec: llm.Spec{Provider: "scripted", Name: id}}}
		if _, err := none.Start(t.Context(), id, spec, toolcall.Principal{Subject: "ana", Scopes: []string{"tools:call"}}, llm.User("3*4?")); err != nil {
			t.Fatal(err)
		}
		st := e.waitEnd(t, id)
		if st.Status != agent.StatusCompleted || st.Answer != "" || st.AnswerBytes != len("the product is twelve") || len(st.AnswerSHA256) != 32 {
			t.Fatalf("state %+v, want completed with the answer's digest and size only", st)
		}
		if answer, err := none.Answer(t.Context(), st); err != nil || answer != "the product is twelve" {
			t.Fatalf("the answer from the transcript: %q, %v", answer, err)
		}
		e.record(t, id, "nocontent")
	})

	t.Run("validation error corrected by the model", func(t *testing.T) {
		t.Parallel()
		id := "validation"
		e.start(t, id, agent.RunSpec{Tools: []string{"KV.Put"}},
			llmtest.CallTools("", call("c1", "KV_Put", map[string]any{"key": "bad key!", "value": "v"})),
			checkLast(llmtest.CallTools("", call("c2", "KV_Put", map[string]any{"key": "validation.ok", "value": "v"})), true, "key"),
			checkLast(llmtest.SayText("stored"), false, "revision"))
		if st := e.waitEnd(t, id); st.Status != agent.StatusCompleted || st.Turn != 3 {
			t.Fatalf("state %+v, want completed after 3 turns", st)
		}
		if puts, _ := e.kv.counts("validation.ok"); puts != 1 {
			t.Fatalf("corrected put ran %d times, want 1", puts)
		}
	})

	t.Run("the same failing call three times ends the run", func(t *testing.T) {
		t.Parallel()
		id := "repeat-fail"
		bad := func() llmtest.ScriptTurn {
			return llmtest.CallTools("", call("c", "KV_Put", map[string]any{"key": "bad key!", "value": "v"}))
		}
		e.start(t, id, agent.RunSpec{Tools: []string{"KV.Put"}}, bad(), bad(), bad(), bad(), llmtest.SayText("never"))
		st := e.waitEnd(t, id)
		if st.Status != agent.StatusFailed || !strings.Contains(st.Failure, "KV_Put 4 times") {
			t.Fatalf("state %+v, want failed after the 4th identical failure", st)
		}
	})

	t.Run("a model failure quotes neither the upstream body nor a redirect's target", func(t *testing.T) {
		t.Parallel()
		const marker = "upstream-private-marker"
		var reached atomic.Int32
		target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			reached.Add(1)
			http.Error(w, marker, http.StatusTeapot)
		}))
		t.Cleanup(target.Close)
		upstream := func(status int, body string) string {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if status/100 == 3 {
					http.Redirect(w, r, target.URL+r.URL.RequestURI(), status)
					return
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(status)
				_, _ = io.WriteString(w, body)
			}))
			t.Cleanup(srv.Close)
			return srv.URL
		}
		gem := func(base string) llm.Model {
			m, err := gemini.New(t.Context(), "gemini-test", &genai.ClientConfig{APIKey: "secret-test-key", Backend: genai.BackendGeminiAPI, HTTPOptions: genai.HTTPOptions{BaseURL: base}})
			if err != nil {
				t.Fatal(err)
			}
			return m
		}
		ant := func(base string) llm.Model {
			return anthropic.New("claude-test", anthropicoption.WithBaseURL(base), anthropicoption.WithAPIKey("secret-test-key"))
		}
		for _, tc := range []struct {
			id    string
			model llm.Model
			want  string
		}{
			{"body-anthropic-html", ant(upstream(400, "<html>"+marker+"</html>")), "model: anthropic: HTTP 400 Bad Request"},
			{"body-anthropic-shaped", ant(upstream(400, `{"type":"error","error":{"type":"invalid_request_error","message":"`+marker+`"}}`)), "model: anthropic: HTTP 400 Bad Request (invalid_request_error)"},
			{"body-gemini-html", gem(upstream(404, "<html>"+marker+"</html>")), "model: gemini: HTTP 404 Not Found"},
			{"body-gemini-shaped", gem(upstream(400, `{"error":{"code":400,"message":"`+marker+`","status":"INVALID_ARGUMENT"}}`)), "model: gemini: HTTP 400 Bad Request (INVALID_ARGUMENT)"},
			{"redirect-anthropic", ant(upstream(307, "")), "redirects are not followed"},
			{"redirect-gemini", gem(upstream(302, "")), "redirects are not followed"},
		} {
			e.models.Register(tc.id, tc.model)
			spec := agent.RunSpec{Model: agent.ModelSpec{Spec: llm.Spec{Provider: "scripted", Name: tc.id}}}
			if _, err := e.runs.Start(t.Context(), tc.id, spec, toolcall.Principal{Subject: "ana", Scopes: []string{"tools:call"}}, llm.User("go")); err != nil {
				t.Fatal(err)
			}
			st := e.waitEnd(t, tc.id)
			if st.Status != agent.StatusFailed || !strings.Contains(st.Failure, tc.want) || strings.Contains(st.Failure, marker) || strings.Contains(st.Failure, "secret-test-key") {
				t.Errorf("%s: state %+v, want failed with %q and without the upstream's body", tc.id, st, tc.want)
			}
		}
		if n := reached.Load(); n != 0 {
			t.Errorf("the redirect target got %d requests", n)
		}
	})

	t.Run("approval granted and denied", func(t *testing.T) {
		t.Parallel()
		id := "approval"
		e.start(t, id, agent.RunSpec{Tools: []string{"SchemaTest.Types"}},
			llmtest.CallTools("", call("c1", "SchemaTest_Types", map[string]any{"s": "approval-yes"})),
			checkLast(llmtest.CallTools("", call("c2", "SchemaTest_Types", map[string]any{"s": "approval-no"})), false, "approval-yes"),
			checkLast(llmtest.SayText("ok"), true, "not on a Monday"))
		ctx := t.Context()
		ev := e.waitEvent(t, id, 1, toolcall.EventApprovalRequested)
		if err := e.runs.Decide(ctx, id, toolcall.Decision{CallID: "unknown", Approved: true, Approver: "bo"}); err == nil {
			t.Fatal("deciding an unknown call was accepted")
		}
		st, err := e.runs.Get(ctx, id)
		if err != nil || st.Status != agent.StatusWaitingApproval || len(st.Pending) != 1 || st.Pending[0].CallID != ev.GetCallId() {
			t.Fatalf("state %+v (%v), want waiting for %s", st, err, ev.GetCallId())
		}
		if err := e.runs.Decide(ctx, id, toolcall.Decision{CallID: ev.GetCallId(), Approved: true, Approver: "bo"}); err != nil {
			t.Fatal(err)
		}
		if err := e.runs.Decide(ctx, id, toolcall.Decision{CallID: ev.GetCallId(), Approved: false, Approver: "bo"}); err == nil {
			t.Fatal("deciding a decided call was accepted")
		}
		ev2 := e.waitEvent(t, id, 2, toolcall.EventApprovalRequested)
		if err := e.runs.Decide(ctx, id, toolcall.Decision{CallID: ev2.GetCallId(), Approver: "bo", Reason: "not on a Monday"}); err != nil {
			t.Fatal(err)
		}
		if st := e.waitEnd(t, id); st.Status != agent.StatusCompleted {
			t.Fatalf("state %+v, want completed", st)
		}
		e.record(t, id, "approval")
		if got := e.fleet.SchemaTest.TypesFor("approval-no"); len(got) != 0 {
			t.Fatalf("the denied call ran: %v", got)
		}
		if got := e.fleet.SchemaTest.TypesFor("approval-yes"); len(got) != 1 || got[0] != ids.RunCall(id, 1, 0) {
			t.Fatalf("the approved call ran with ids %v, want once as %s", got, ids.RunCall(id, 1, 0))
		}
	})

	t.Run("can_retry with retry_after becomes a Temporal retry", func(t *testing.T) {
		t.Parallel()
		for _, tt := range []struct {
			s       string
			runs    int
			isError bool
		}{
			{"flaky:agent", 2, false}, // fails once, then succeeds on Temporal's retry
			{"retry:agent", 3, true},  // fails every time: the contract's 3 attempts, then an error result
		} {
			id := "retry-" + strings.TrimSuffix(tt.s, ":agent")
			e.start(t, id, agent.RunSpec{Tools: []string{"SchemaTest.Types"}},
				llmtest.CallTools("", call("c1", "SchemaTest_Types", map[string]any{"s": tt.s})),
				checkLast(llmtest.SayText("ok"), tt.isError, ""))
			ev := e.waitEvent(t, id, 1, toolcall.EventApprovalRequested)
			if err := e.runs.Decide(t.Context(), id, toolcall.Decision{CallID: ev.GetCallId(), Approved: true, Approver: "bo"}); err != nil {
				t.Fatal(err)
			}
			if st := e.waitEnd(t, id); st.Status != agent.StatusCompleted {
				t.Fatalf("%s: state %+v, want completed", id, st)
			}
			callIDs := e.fleet.SchemaTest.TypesFor(tt.s)
			if len(callIDs) != tt.runs {
				t.Fatalf("%s: the tool ran %d times, want %d", id, len(callIDs), tt.runs)
			}
			for _, c := range callIDs {
				if c != ids.RunCall(id, 1, 0) {
					t.Fatalf("%s: attempt with call id %q, want %q every time", id, c, ids.RunCall(id, 1, 0))
				}
			}
		}
	})

	t.Run("approval timeout is a denial", func(t *testing.T) {
		t.Parallel()
		id := "approval-timeout"
		e.start(t, id, agent.RunSpec{Tools: []string{"Calculator.Add"},
			Approval: agent.ApprovalPolicy{Tools: []string{"Calculator.*"}, Timeout: time.Second}},
			llmtest.CallTools("", call("c1", "Calculator_Add", map[string]any{"a": 1, "b": 1})),
			checkLast(llmtest.SayText("ok"), true, "no decision within 1s"))
		if st := e.waitEnd(t, id); st.Status != agent.StatusCompleted {
			t.Fatalf("state %+v, want completed", st)
		}
	})

	loop := func() llmtest.ScriptTurn {
		return withUsage(llmtest.CallTools("", call("c", "Calculator_Add", map[string]any{"a": 1, "b": 1}),
			call("d", "Calculator_Add", map[string]any{"a": 2, "b": 2})), 100, 10)
	}
	budgets := []struct {
		name   string
		budget agent.Budget
		want   string
	}{
		{"max_turns", agent.Budget{MaxTurns: 2}, "max_turns"},
		{"max_tool_calls", agent.Budget{MaxToolCalls: 3}, "max_tool_calls"},
		{"max_input_tokens", agent.Budget{MaxInputTokens: 250}, "max_input_tokens"},
		{"max_output_tokens", agent.Budget{MaxOutputTokens: 15}, "max_output_tokens"},
	}
	for _, b := range budgets {
		t.Run("budget "+b.name, func(t *testing.T) {
			t.Parallel()
			id := "budget-" + strings.ReplaceAll(b.name, "_", "-")
			e.start(t, id, agent.RunSpec{Tools: []string{"Calculator.Add"}, Budget: b.budget}, loop(), loop(), loop(), loop(), loop())
			st := e.waitEnd(t, id)
			if st.Status != agent.StatusBudgetExhausted || st.Failure != b.want {
				t.Fatalf("state %+v, want budget %s exhausted", st, b.want)
			}
			msgs := e.transcript(t, id)
			calls := 0
			for _, m := range msgs {
				calls += len(llm.ToolCalls(m))
			}
			if rs := results(msgs); len(rs) != calls {
				t.Fatalf("%d tool calls but %d results in the transcript, want every call answered", calls, len(rs))
			}
		})
	}

	t.Run("budget deadline", func(t *testing.T) {
		t.Parallel()
		id := "budget-deadline"
		e.start(t, id, agent.RunSpec{Tools: []string{"SchemaTest.Types"}, Budget: agent.Budget{Deadline: 2 * time.Second}},
			llmtest.CallTools("", call("c1", "SchemaTest_Types", map[string]any{"s": "deadline"})))
		st := e.waitEnd(t, id)
		if st.Status != agent.StatusBudgetExhausted || st.Failure != "deadline" {
			t.Fatalf("state %+v, want the deadline budget", st)
		}
	})

	t.Run("cancel", func(t *testing.T) {
		t.Parallel()
		id := "cancel"
		e.start(t, id, agent.RunSpec{Tools: []string{"SchemaTest.Types"}},
			llmtest.CallTools("", call("c1", "SchemaTest_Types", map[string]any{"s": "cancel"})))
		e.waitEvent(t, id, 1, toolcall.EventApprovalRequested)
		if err := e.runs.Cancel(t.Context(), id); err != nil {
			t.Fatal(err)
		}
		st := e.waitEnd(t, id)
		if st.Status != agent.StatusCanceled {
			t.Fatalf("state %+v, want cancelled", st)
		}
		e.record(t, id, "cancelled")
		err := e.runs.Temporal.GetWorkflow(t.Context(), id, "").Get(t.Context(), nil)
		var ce *temporal.CanceledError
		if !errors.As(err, &ce) {
			t.Fatalf("workflow result %v, want cancelled", err)
		}
	})

	t.Run("SendMessage continues a run, also after its workflow closed", func(t *testing.T) {
		t.Parallel()
		for _, idle := range []time.Duration{time.Minute, -1} {
			id := fmt.Sprintf("send-%d", idle.Milliseconds())
			if idle < 0 {
				id = "send-closed"
			}
			e.start(t, id, agent.RunSpec{Tools: []string{"Calculator.Add"}, IdleTimeout: idle},
				llmtest.SayText("first answer"),
				llmtest.CallTools("", call("c", "Calculator_Add", map[string]any{"a": 20, "b": 22})),
				checkLast(llmtest.SayText("second answer"), false, "42"))
			e.waitEvent(t, id, 1, toolcall.EventCompleted)
			if err := e.runs.SendMessage(t.Context(), id, llm.User("and now add 20 and 22")); err != nil {
				t.Fatalf("%s: SendMessage: %v", id, err)
			}
			e.waitEvent(t, id, 2, toolcall.EventCompleted)
			st, err := e.runs.Get(t.Context(), id)
			if err != nil || st.Answer != "second answer" || st.Turn != 3 {
				t.Fatalf("%s: state %+v (%v), want the second answer after turn 3", id, st, err)
			}
			if msgs := e.transcript(t, id); len(msgs) != 7 {
				t.Fatalf("%s: %d messages, want 7 (system, user, answer, user, call, result, answer)", id, len(msgs))
			}
		}
	})

	t.Run("ContinueAsNew crossed mid-run", func(t *testing.T) {
		t.Parallel()
		id := "continue"
		turns := []llmtest.ScriptTurn{}
		for i := range 5 {
			turns = append(turns, llmtest.CallTools("", call("c", "Calculator_Add", map[string]any{"a": i, "b": 1})))
		}
		turns = append(turns, checkLast(llmtest.SayText("done"), false, `{"result":5}`))
		e.start(t, id, agent.RunSpec{Tools: []string{"Calculator.Add"}, ContinueEveryTurns: 2, IdleTimeout: -1}, turns...)
		st := e.waitEnd(t, id)
		if st.Status != agent.StatusCompleted || st.Turn != 6 || st.ToolCalls != 5 {
			t.Fatalf("state %+v, want completed after 6 turns and 5 calls", st)
		}
		desc, err := e.runs.Temporal.DescribeWorkflowExecution(t.Context(), id, "")
		if err != nil {
			t.Fatal(err)
		}
		if first := desc.GetWorkflowExecutionInfo().GetFirstRunId(); first == desc.GetWorkflowExecutionInfo().GetExecution().GetRunId() {
			t.Fatal("the run never continued as new")
		}
		e.record(t, id, "continued")
	})
}

// TestHistoryStaysSmall drives a 100-turn run whose tool returns 50 KB each
// turn: the transcript grows to megabytes, workflow history must not.
func TestHistoryStaysSmall(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := "long-run"
	const turns = 100
	value := strings.Repeat("0123456789abcdef", 50<<10/16) // 50 KB
	script := []llmtest.ScriptTurn{llmtest.CallTools("", call("p", "KV_Put", map[string]any{"key": "long.value", "value": value}))}
	for i := 1; i < turns; i++ {
		script = append(script, llmtest.CallTools("", call(fmt.Sprintf("g%d", i), "KV_Get", map[string]any{"key": "long.value"})))
	}
	script = append(script, llmtest.SayText("read it 99 times"))
	e.start(t, id, agent.RunSpec{Tools: []string{"KV.Put", "KV.Get"}, Budget: agent.Budget{MaxTurns: turns + 1}, IdleTimeout: -1}, script...)
	st := e.waitEnd(t, id)
	if st.Status != agent.StatusCompleted || st.Turn != turns+1 {
		t.Fatalf("state %+v, want completed after %d turns", st, turns+1)
	}
	h := e.history(t, id)
	historyBytes := proto.Size(h)
	// What a design passing the transcript through activities would record:
	// each model turn's input is the whole transcript so far, and each tool
	// result is recorded once more as an activity result.
	msgs := e.transcript(t, id)
	naive, sofar, transcript := 0, 0, 0
	for _, m := range msgs {
		n := proto.Size(m)
		transcript += n
		if r := results([]*toolfleetv1.Message{m}); len(r) == 1 && strings.Contains(r[0].GetContent(), "[result truncated") {
			n += len(value) - len(r[0].GetContent()) // the whole result, not its preview
		}
		if m.GetRole() == toolfleetv1.Role_ROLE_ASSISTANT {
			naive += sofar
		}
		if m.GetRole() == toolfleetv1.Role_ROLE_TOOL {
			naive += n
		}
		sofar += n
	}
	t.Logf("%d turns, tool results of %d bytes: history %d bytes in %d events (%d bytes/turn); transcript %d bytes; a transcript-in-history design would record at least %d bytes",
		st.Turn, len(value), historyBytes, len(h.GetEvents()), historyBytes/st.Turn, transcript, naive)
	if historyBytes >= 1<<20 {
		t.Fatalf("history is %d bytes, want < 1 MiB", historyBytes)
	}
	if naive < 10*historyBytes {
		t.Fatalf("the naive figure %d is not far above the history %d: is the test measuring anything?", naive, historyBytes)
	}
}
