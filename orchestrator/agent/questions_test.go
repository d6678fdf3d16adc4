package agent_test

import (
	"strings"
	"testing"

	conformancev1 "github.com/toolfleet/toolfleet/gen/tools/conformance/v1"
	"github.com/toolfleet/toolfleet/orchestrator/agent"
	"github.com/toolfleet/toolfleet/orchestrator/ids"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall"
	"github.com/toolfleet/toolfleet/sdk/llm/llmtest"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/workers/conformance/conformance"
)

// TestQuestions runs tools that ask their caller for input inside runs: the
// question becomes pending input (WAITING_INPUT, GetRun's Questions,
// input.requested), a reply that does not fit is refused, the answers go
// back to the tool with its sealed state under the same call id over two
// rounds, and a run that declines questions gets an error result saying why.
func TestQuestions(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.fleet.AddWorker(t, func(w *tool.Worker) { conformancev1.RegisterConformanceServiceServer(w, conformance.New()) })
	e.fleet.WaitTool(t, "Conformance.InputRequiredMultiRound")

	t.Run("two rounds answered", func(t *testing.T) {
		t.Parallel()
		id := "questions-answered"
		e.start(t, id, agent.RunSpec{Tools: []string{"Conformance.InputRequiredMultiRound"}},
			llmtest.CallTools("", call("c1", "Conformance_InputRequiredMultiRound", map[string]any{})),
			checkLast(llmtest.SayText("done"), false, "Ada likes teal"))
		ctx := t.Context()
		callID := ids.RunCall(id, 1, 0)
		ev := e.waitEvent(t, id, 1, toolcall.EventInputRequested)
		if ev.GetCallId() != callID || !strings.Contains(ev.GetMessage(), "What is your name?") {
			t.Fatalf("input.requested %v, want call %s asking the name", ev, callID)
		}
		st, err := e.runs.Get(ctx, id)
		if err != nil || st.Status != agent.StatusWaitingInput || len(st.Questions) != 1 || st.Questions[0].Key != "step1" ||
			!strings.Contains(st.Questions[0].SchemaJSON, `"name"`) {
			t.Fatalf("state %+v (%v), want waiting for step1 with its schema", st, err)
		}
		for _, bad := range []toolcall.Reply{
			{CallID: callID, Key: "step1", Action: "accept", ContentJSON: `{"name": 7}`, Answerer: "bo"},
			{CallID: callID, Key: "step1", Action: "accept", ContentJSON: `{}`, Answerer: "bo"},
			{CallID: callID, Key: "step1", Action: "maybe", Answerer: "bo"},
			{CallID: callID, Key: "step1", Action: "accept", ContentJSON: `{"name":"x"}`},
			{CallID: callID, Key: "other", Action: "accept", ContentJSON: `{"name":"x"}`, Answerer: "bo"},
			{CallID: "nope", Key: "step1", Action: "accept", ContentJSON: `{"name":"x"}`, Answerer: "bo"},
		} {
			if err := e.runs.AnswerQuestion(ctx, id, bad); err == nil {
				t.Fatalf("reply %+v was accepted", bad)
			}
		}
		if err := e.runs.AnswerQuestion(ctx, id, toolcall.Reply{CallID: callID, Key: "step1", Action: "accept", ContentJSON: `{"name":"Ada"}`, Answerer: "bo"}); err != nil {
			t.Fatal(err)
		}
		ev = e.waitEvent(t, id, 2, toolcall.EventInputRequested)
		if ev.GetCallId() != callID || !strings.Contains(ev.GetMessage(), "favorite color") {
			t.Fatalf("second input.requested %v, want the colour under call %s", ev, callID)
		}
		if err := e.runs.AnswerQuestion(ctx, id, toolcall.Reply{CallID: callID, Key: "step2", Action: "accept", ContentJSON: `{"color":"teal"}`, Answerer: "bo"}); err != nil {
			t.Fatal(err)
		}
		if st := e.waitEnd(t, id); st.Status != agent.StatusCompleted || len(st.Questions) != 0 || st.ToolCalls != 1 {
			t.Fatalf("state %+v, want completed after one call with no question left", st)
		}
		e.record(t, id, "questions")
	})

	t.Run("declined by the run's policy", func(t *testing.T) {
		t.Parallel()
		id := "questions-declined"
		e.start(t, id, agent.RunSpec{Tools: []string{"Conformance.InputRequiredMultiRound"}, Questions: agent.QuestionsDecline},
			llmtest.CallTools("", call("c1", "Conformance_InputRequiredMultiRound", map[string]any{})),
			checkLast(llmtest.SayText("done"), true, "elicitation"))
		if st := e.waitEnd(t, id); st.Status != agent.StatusCompleted {
			t.Fatalf("state %+v, want completed", st)
		}
	})

	t.Run("unanswered in time", func(t *testing.T) {
		t.Parallel()
		id := "questions-unanswered"
		e.start(t, id, agent.RunSpec{Tools: []string{"Conformance.InputRequiredMultiRound"}, Approval: agent.ApprovalPolicy{Timeout: 1e9}},
			llmtest.CallTools("", call("c1", "Conformance_InputRequiredMultiRound", map[string]any{})),
			checkLast(llmtest.SayText("done"), true, "no answer to the tool's question (step1)"))
		if st := e.waitEnd(t, id); st.Status != agent.StatusCompleted || len(st.Questions) != 0 {
			t.Fatalf("state %+v, want completed with no question left", st)
		}
	})
}
