package agentapi_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	conformancev1 "github.com/toolfleet/toolfleet/gen/tools/conformance/v1"
	"github.com/toolfleet/toolfleet/orchestrator/agent"
	"github.com/toolfleet/toolfleet/orchestrator/agent/agenttest"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/llmtest"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/workers/conformance/conformance"
)

// TestQuestionTenancy: a tool's question in alice's run is listed by GetRun
// for alice alone; mallory can neither see nor answer it; an answer that does
// not fit the question's schema is INVALID_ARGUMENT with the field named;
// alice's answer reaches the tool and the run completes.
func TestQuestionTenancy(t *testing.T) {
	t.Parallel()
	models := agent.NewResolver()
	models.Register("asks", &agenttest.ByTurn{Turns: []llmtest.ScriptTurn{
		llmtest.CallTools("", llm.CallPart("c1", "Conformance_InputRequiredElicitation", map[string]any{})),
		llmtest.SayText("greeted"),
	}})
	tn := startTenants(t, "question-tenancy", models)
	tn.fleet.AddWorker(t, func(w *tool.Worker) { conformancev1.RegisterConformanceServiceServer(w, conformance.New()) })
	tn.fleet.WaitTool(t, "Conformance.InputRequiredElicitation")
	ctx := t.Context()
	const id = "asks-1"
	if _, err := tn.aliceRuns.StartRun(ctx, connect.NewRequest(&toolfleetv1.StartRunRequest{RunId: id, Model: "scripted:asks",
		Messages: []*toolfleetv1.Message{llm.User("greet me")}, Tools: []string{"Conformance.InputRequiredElicitation"}})); err != nil {
		t.Fatal(err)
	}
	var q *toolfleetv1.PendingQuestion
	for deadline := time.Now().Add(60 * time.Second); q == nil; time.Sleep(50 * time.Millisecond) {
		st, err := tn.aliceRuns.GetRun(ctx, connect.NewRequest(&toolfleetv1.GetRunRequest{RunId: id}))
		if err != nil {
			t.Fatal(err)
		}
		if p := st.Msg.GetPendingQuestions(); len(p) > 0 {
			q = p[0]
			if st.Msg.GetStatus() != toolfleetv1.RunStatus_RUN_STATUS_WAITING_INPUT {
				t.Fatalf("status %v with a question pending, want WAITING_INPUT", st.Msg.GetStatus())
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run never asked: %v", st.Msg)
		}
	}
	if q.GetKey() != "user_name" || q.GetMessage() != "What is your name?" || q.GetRequestedSchema().GetFields()["properties"] == nil {
		t.Fatalf("question %v, want user_name with its schema", q)
	}
	content := func(m map[string]any) *structpb.Struct {
		s, err := structpb.NewStruct(m)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	code := func(err error) connect.Code {
		var ce *connect.Error
		if errors.As(err, &ce) {
			return ce.Code()
		}
		return connect.CodeUnknown
	}
	if _, err := tn.malloryRuns.GetRun(ctx, connect.NewRequest(&toolfleetv1.GetRunRequest{RunId: id})); code(err) != connect.CodeNotFound {
		t.Fatalf("mallory's GetRun: %v, want NOT_FOUND", err)
	}
	if _, err := tn.malloryRuns.AnswerInput(ctx, connect.NewRequest(&toolfleetv1.AnswerInputRequest{RunId: id, CallId: q.GetCallId(),
		Content: content(map[string]any{"name": "Mallory"})})); code(err) != connect.CodeNotFound {
		t.Fatalf("mallory's AnswerInput: %v, want NOT_FOUND", err)
	}
	_, err := tn.aliceRuns.AnswerInput(ctx, connect.NewRequest(&toolfleetv1.AnswerInputRequest{RunId: id, CallId: q.GetCallId(),
		Content: content(map[string]any{"name": 7})}))
	if code(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "name") {
		t.Fatalf("an answer of the wrong type: %v, want INVALID_ARGUMENT naming the field", err)
	}
	if _, err := tn.aliceRuns.AnswerInput(ctx, connect.NewRequest(&toolfleetv1.AnswerInputRequest{RunId: id, CallId: "other/1/0",
		Content: content(map[string]any{"name": "Ada"})})); err == nil {
		t.Fatal("an answer to a call of another run was accepted")
	}
	resp, err := tn.aliceRuns.AnswerInput(ctx, connect.NewRequest(&toolfleetv1.AnswerInputRequest{RunId: id, CallId: q.GetCallId(),
		Content: content(map[string]any{"name": "Ada"})}))
	if err != nil || resp.Msg.GetKey() != "user_name" || resp.Msg.GetOpen() != 0 {
		t.Fatalf("alice's answer: %v, %v", resp, err)
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		st, err := tn.aliceRuns.GetRun(ctx, connect.NewRequest(&toolfleetv1.GetRunRequest{RunId: id}))
		if err != nil {
			t.Fatal(err)
		}
		if st.Msg.GetStatus() == toolfleetv1.RunStatus_RUN_STATUS_COMPLETED {
			if st.Msg.GetAnswer() != "greeted" || len(st.Msg.GetPendingQuestions()) != 0 || st.Msg.GetToolCalls() != 1 {
				t.Fatalf("completed run %v, want the scripted answer after one call", st.Msg)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run did not complete after the answer: %v", st.Msg)
		}
	}
}

// TestProgramQuestions: a program's tool asks two rounds of questions; they
// wait as pending input of the program (WAITING_INPUT), mallory can neither
// see nor answer them, and the program's result holds what the tool made of
// alice's answers.
func TestProgramQuestions(t *testing.T) {
	t.Parallel()
	tn := startTenants(t, "program-questions", agent.NewResolver())
	tn.fleet.AddWorker(t, func(w *tool.Worker) { conformancev1.RegisterConformanceServiceServer(w, conformance.New()) })
	tn.fleet.WaitTool(t, "Conformance.InputRequiredMultiRound")
	ctx := t.Context()
	const id = "asks-p1"
	if _, err := tn.alicePrograms.RunProgram(ctx, connect.NewRequest(&toolfleetv1.RunProgramRequest{ProgramId: id,
		ToolCall: &toolfleetv1.ProgramToolCall{ToolId: "Conformance.InputRequiredMultiRound"}})); err != nil {
		t.Fatal(err)
	}
	question := func(key string) *toolfleetv1.PendingQuestion {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			st, err := tn.alicePrograms.GetProgram(ctx, connect.NewRequest(&toolfleetv1.GetProgramRequest{ProgramId: id}))
			if err != nil {
				t.Fatal(err)
			}
			if p := st.Msg.GetPendingQuestions(); len(p) == 1 && p[0].GetKey() == key {
				if st.Msg.GetStatus() != toolfleetv1.ProgramStatus_PROGRAM_STATUS_WAITING_INPUT {
					t.Fatalf("status %v with a question pending, want WAITING_INPUT", st.Msg.GetStatus())
				}
				return p[0]
			}
			if time.Now().After(deadline) {
				t.Fatalf("the program never asked %s: %v", key, st.Msg)
			}
		}
	}
	answer := func(client interface {
		AnswerProgramInput(context.Context, *connect.Request[toolfleetv1.AnswerProgramInputRequest]) (*connect.Response[toolfleetv1.AnswerProgramInputResponse], error)
	}, callID string, content map[string]any) error {
		s, err := structpb.NewStruct(content)
		if err != nil {
			t.Fatal(err)
		}
		_, err = client.AnswerProgramInput(ctx, connect.NewRequest(&toolfleetv1.AnswerProgramInputRequest{ProgramId: id, CallId: callID, Content: s}))
		return err
	}
	q := question("step1")
	if _, err := tn.malloryPrograms.GetProgram(ctx, connect.NewRequest(&toolfleetv1.GetProgramRequest{ProgramId: id})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("mallory's GetProgram: %v, want NOT_FOUND", err)
	}
	if err := answer(tn.malloryPrograms, q.GetCallId(), map[string]any{"name": "Mallory"}); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("mallory's answer: %v, want NOT_FOUND", err)
	}
	if err := answer(tn.alicePrograms, q.GetCallId(), map[string]any{"colour": "x"}); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("an answer without the required field: %v, want INVALID_ARGUMENT", err)
	}
	if err := answer(tn.alicePrograms, q.GetCallId(), map[string]any{"name": "Ada"}); err != nil {
		t.Fatal(err)
	}
	q2 := question("step2")
	if q2.GetCallId() != q.GetCallId() {
		t.Fatalf("the second round is call %s, want the same call %s", q2.GetCallId(), q.GetCallId())
	}
	if err := answer(tn.alicePrograms, q2.GetCallId(), map[string]any{"color": "teal"}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		st, err := tn.alicePrograms.GetProgram(ctx, connect.NewRequest(&toolfleetv1.GetProgramRequest{ProgramId: id}))
		if err != nil {
			t.Fatal(err)
		}
		if st.Msg.GetDone() {
			if b, _ := protojson.Marshal(st.Msg.GetResult()); !strings.Contains(string(b), "Ada likes teal") || st.Msg.GetToolCalls() != 1 {
				t.Fatalf("program %v, want one call whose result holds the answers", st.Msg)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the program did not end after the answers: %v", st.Msg)
		}
	}
	// The page's detail tells the rounds that asked from the one that answered.
	det, err := tn.alicePrograms.GetProgram(ctx, connect.NewRequest(&toolfleetv1.GetProgramRequest{ProgramId: id, Detail: true}))
	if err != nil {
		t.Fatal(err)
	}
	var asked []string
	for _, c := range det.Msg.GetDetail().GetCalls() {
		if len(c.GetAsked()) > 0 {
			if c.GetResultJson() != "" || c.GetError() != nil {
				t.Errorf("a round that asked %v also has a result or an error: %v", c.GetAsked(), c)
			}
			asked = append(asked, c.GetAsked()...)
		}
	}
	if strings.Join(asked, ",") != "step1,step2" {
		t.Errorf("rounds asked %v, want [step1 step2] (the detail's calls: %v)", asked, det.Msg.GetDetail().GetCalls())
	}
}

// TestProgramPartialAnswers: a tool asks two questions in one round; answered
// one at a time, the answered one leaves the pending list while the other
// still waits (the program stays WAITING_INPUT), and the call goes on once
// both are answered.
func TestProgramPartialAnswers(t *testing.T) {
	t.Parallel()
	tn := startTenants(t, "program-partial", agent.NewResolver())
	tn.fleet.AddWorker(t, func(w *tool.Worker) { conformancev1.RegisterConformanceServiceServer(w, conformance.New()) })
	tn.fleet.WaitTool(t, "Conformance.MultiInput")
	ctx := t.Context()
	const id = "asks-p2"
	if _, err := tn.alicePrograms.RunProgram(ctx, connect.NewRequest(&toolfleetv1.RunProgramRequest{ProgramId: id,
		ToolCall: &toolfleetv1.ProgramToolCall{ToolId: "Conformance.MultiInput"}})); err != nil {
		t.Fatal(err)
	}
	waitFor := func(what string, ok func(*toolfleetv1.GetProgramResponse) bool) *toolfleetv1.GetProgramResponse {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			st, err := tn.alicePrograms.GetProgram(ctx, connect.NewRequest(&toolfleetv1.GetProgramRequest{ProgramId: id}))
			if err != nil {
				t.Fatal(err)
			}
			if ok(st.Msg) {
				return st.Msg
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s never happened: %v", what, st.Msg)
			}
		}
	}
	keys := func(st *toolfleetv1.GetProgramResponse) string {
		var ks []string
		for _, q := range st.GetPendingQuestions() {
			ks = append(ks, q.GetKey())
		}
		return strings.Join(ks, ",")
	}
	st := waitFor("two questions", func(st *toolfleetv1.GetProgramResponse) bool { return len(st.GetPendingQuestions()) == 2 })
	callID := st.GetPendingQuestions()[0].GetCallId()
	answer := func(key string, content map[string]any) {
		t.Helper()
		s, err := structpb.NewStruct(content)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tn.alicePrograms.AnswerProgramInput(ctx, connect.NewRequest(&toolfleetv1.AnswerProgramInputRequest{
			ProgramId: id, CallId: callID, Key: key, Action: "accept", Content: s})); err != nil {
			t.Fatal(err)
		}
	}
	answer("name", map[string]any{"name": "Ada"})
	st = waitFor("the answered question leaving", func(st *toolfleetv1.GetProgramResponse) bool { return keys(st) == "confirm" })
	if st.GetStatus() != toolfleetv1.ProgramStatus_PROGRAM_STATUS_WAITING_INPUT {
		t.Fatalf("status %v with one question still pending, want WAITING_INPUT", st.GetStatus())
	}
	answer("confirm", map[string]any{"confirm": true})
	st = waitFor("the end", func(st *toolfleetv1.GetProgramResponse) bool { return st.GetDone() })
	if b, _ := protojson.Marshal(st.GetResult()); !strings.Contains(string(b), "Got name Ada and confirm true.") {
		t.Fatalf("program %v, want the call's result with both answers", st)
	}
}
