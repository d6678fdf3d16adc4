package main

import (
	"context"
	"errors"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/gen/toolfleet/v1/toolfleetv1connect"
	"github.com/toolfleet/toolfleet/internal/devstack/devstacktest"
)

// askScript is a scripted model that calls a tool asking the caller's name.
const askScript = `turns:
  - text: 'Greeting.'
    calls:
      - tool: Conformance.InputRequiredElicitation
        id: greet
        args: {}
  - text: 'Greeted.'
`

// TestConsoleQuestions drives the console's inbox with a tool's question
// (the Conformance toolkit's elicitation) in a run and in a program: the
// inbox shows it as a form, a refused answer is shown in the API's words,
// another principal neither sees nor answers it, and the answer given in
// the console lets the run and the program complete.
func TestConsoleQuestions(t *testing.T) {
	t.Parallel()
	stack := devstacktest.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "ask.yaml"), []byte(askScript), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := devConfig{Host: "127.0.0.1", JWTSecret: "console-questions-secret-console-questions", ScriptDir: dir, Conformance: true}
	svc, err := startDevServices(ctx, stack, cfg, devServiceOptions{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), MemoryStorage: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.stop() })
	base := "http://" + svc.fleet.Gateway.Addr()

	alice := newConsoleBrowser(t, base)
	alice.signIn("alice")
	bob := newConsoleBrowser(t, base)
	bob.signIn("bob")

	// A run whose tool asks; the inbox shows the question as a form and counts it.
	res, body := alice.post("/console/runs", url.Values{"model": {"scripted:ask.yaml"}, "tools": {"Conformance.InputRequiredElicitation"},
		"prompt": {"greet me"}})
	m := regexp.MustCompile(`/console/runs/(run-[a-z0-9]+)$`).FindStringSubmatch(res.Request.URL.Path)
	if m == nil {
		t.Fatalf("starting a run did not open its page: %d %s\n%s", res.StatusCode, res.Request.URL, body)
	}
	runID := m[1]
	callID := runID + "/1/0"
	waitFor(ctx, t, "the inbox to show the run's question", func() bool {
		_, body := alice.get("/console/inbox")
		return strings.Contains(body, "What is your name?")
	})
	_, body = alice.get("/console/inbox")
	for _, want := range []string{`action="/console/runs/` + runID + `/answer"`, callID, `name="key" value="user_name"`, `name="in.name"`,
		`value="accept"`, `value="decline"`, `value="cancel"`, `id="inbox-count">1<`} {
		if !strings.Contains(body, want) {
			t.Errorf("alice's inbox lacks %s:\n%s", want, body)
		}
	}

	// The runs list lists it as waiting for input, and filters on that.
	waitFor(ctx, t, "the runs list to show the run waiting for input", func() bool {
		_, body := alice.get("/console/runs?status=waiting_input")
		return strings.Contains(body, runID) && strings.Contains(body, ">waiting input<")
	})

	// Bob sees none of it and cannot answer it.
	if _, body := bob.get("/console/inbox"); strings.Contains(body, runID) || strings.Contains(body, "What is your name?") {
		t.Errorf("bob's inbox shows alice's question:\n%s", body)
	}
	answer := url.Values{"call_id": {callID}, "key": {"user_name"}, "action": {"accept"}, "in.name": {"Mallory"}}
	if res, _ := bob.post("/console/runs/"+runID+"/answer", answer); res.StatusCode != http.StatusNotFound {
		t.Errorf("bob's answer to alice's question: %d, want 404", res.StatusCode)
	}
	// Without the CSRF token nothing is answered.
	if res, _ := alice.postRaw("/console/runs/"+runID+"/answer", answer); res.StatusCode != http.StatusForbidden {
		t.Errorf("an answer without a CSRF token: %d, want 403", res.StatusCode)
	}

	// An answer the schema refuses (the required name left out) shows the
	// API's own words beside the question, and the question still waits.
	runs := toolfleetv1connect.NewAgentServiceClient(http.DefaultClient, base)
	empty, _ := structpb.NewStruct(map[string]any{})
	areq := connect.NewRequest(&toolfleetv1.AnswerInputRequest{RunId: runID, CallId: callID, Key: "user_name", Content: empty})
	areq.Header().Set("Authorization", "Bearer "+tenantToken(t, cfg.JWTSecret, "alice", "runs:approve"))
	_, aerr := runs.AnswerInput(ctx, areq)
	var ce *connect.Error
	if !errors.As(aerr, &ce) || ce.Code() != connect.CodeInvalidArgument {
		t.Fatalf("AnswerInput without the required name: %v, want InvalidArgument", aerr)
	}
	res, body = alice.post("/console/runs/"+runID+"/answer", url.Values{"call_id": {callID}, "key": {"user_name"}, "action": {"accept"}, "in.name": {""}})
	if res.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(body, html.EscapeString(ce.Message())) || !strings.Contains(body, "What is your name?") {
		t.Errorf("a refused answer: %d, want 422 with the API's words %q\n%s", res.StatusCode, ce.Message(), body)
	}

	// The run's page shows the question with the same form, posting back to it.
	_, body = alice.get("/console/runs/" + runID)
	for _, want := range []string{`id="run-questions"`, "What is your name?", `action="/console/runs/` + runID + `/answer"`,
		`name="back" value="run"`, `name="in.name"`} {
		if !strings.Contains(body, want) {
			t.Errorf("the run's page lacks %s:\n%s", want, body)
		}
	}
	// Refused there, the run's page comes back with the API's words beside it.
	res, body = alice.post("/console/runs/"+runID+"/answer", url.Values{"call_id": {callID}, "key": {"user_name"}, "action": {"accept"},
		"in.name": {""}, "back": {"run"}})
	if res.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(body, `id="run-questions"`) ||
		!strings.Contains(body, `class="problem answer-problem">`+html.EscapeString(ce.Message())) {
		t.Errorf("a refused answer on the run's page: %d, want 422 with the API's words beside the question\n%s", res.StatusCode, body)
	}

	// Alice's answer from the run's page completes the run with it.
	answer.Set("in.name", "Ada <b>Lovelace</b>")
	answer.Set("back", "run")
	res, body = alice.post("/console/runs/"+runID+"/answer", answer)
	if res.StatusCode != http.StatusOK || !strings.HasSuffix(res.Request.URL.Path, "/console/runs/"+runID) || strings.Contains(body, `id="run-questions"`) {
		t.Fatalf("answering from the run's page: %d %s\n%s", res.StatusCode, res.Request.URL, body)
	}
	waitFor(ctx, t, "the run to complete", func() bool {
		_, body := alice.get("/console/runs/" + runID)
		return strings.Contains(body, `id="run-status">completed<`)
	})
	if stream := alice.events(ctx, runID, 10*time.Second); !strings.Contains(stream, `Hello, Ada \u003cb\u003eLovelace\u003c/b\u003e!`) {
		t.Errorf("the run's stream lacks the tool's greeting with the answer:\n%s", stream)
	}

	// A program's question: shown, answered by a decline then by a name.
	progs := toolfleetv1connect.NewProgramServiceClient(http.DefaultClient, base)
	const progID = "console-asks"
	preq := connect.NewRequest(&toolfleetv1.RunProgramRequest{ProgramId: progID,
		ToolCall: &toolfleetv1.ProgramToolCall{ToolId: "Conformance.InputRequiredElicitation"}})
	preq.Header().Set("Authorization", "Bearer "+tenantToken(t, cfg.JWTSecret, "alice", "programs:run", "programs:read", "tools:call"))
	if _, err := progs.RunProgram(ctx, preq); err != nil {
		t.Fatalf("RunProgram: %v", err)
	}
	progCall := ""
	waitFor(ctx, t, "the inbox to show the program's question", func() bool {
		_, body := alice.get("/console/inbox")
		if m := regexp.MustCompile(`action="/console/programs/` + progID + `/answer"[^>]*>\s*<input type="hidden" name="csrf" value="[^"]*">\s*<input type="hidden" name="call_id" value="([^"]+)"`).FindStringSubmatch(body); m != nil {
			progCall = m[1]
		}
		return progCall != ""
	})
	if res, _ := bob.post("/console/programs/"+progID+"/answer", url.Values{"call_id": {progCall}, "action": {"decline"}}); res.StatusCode != http.StatusNotFound {
		t.Errorf("bob's answer to alice's program: %d, want 404", res.StatusCode)
	}
	// The program's page shows it too, posting back to the program's page.
	_, body = alice.get("/console/programs/" + progID)
	for _, want := range []string{`id="program-questions"`, "What is your name?", `action="/console/programs/` + progID + `/answer"`, `name="back" value="program"`} {
		if !strings.Contains(body, want) {
			t.Errorf("the program's page lacks %s:\n%s", want, body)
		}
	}
	if _, body := bob.get("/console/programs/" + progID); strings.Contains(body, "What is your name?") {
		t.Errorf("bob sees alice's program's question:\n%s", body)
	}
	// The program's page is live: its stream replays the events so far (the
	// question), then follows the program past the answer to its end.
	if res, _ := bob.get("/console/programs/" + progID + "/events"); res.StatusCode != http.StatusNotFound {
		t.Errorf("bob's stream of alice's program: %d, want 404", res.StatusCode)
	}
	streamed := alice.stream(ctx, "/console/programs/"+progID+"/events")
	waitFor(ctx, t, "the program's stream to show the question", func() bool {
		return strings.Contains(streamed.String(), `id="program-questions"`)
	})
	// Answered from the inbox (its form says back=inbox), the inbox comes back.
	if res, _ := alice.post("/console/programs/"+progID+"/answer", url.Values{"call_id": {progCall}, "key": {"user_name"}, "action": {"accept"},
		"in.name": {"Grace"}, "back": {"inbox"}}); res.StatusCode != http.StatusOK || !strings.HasSuffix(res.Request.URL.Path, "/console/inbox") {
		t.Errorf("answering the program's question from the inbox: %d %s", res.StatusCode, res.Request.URL)
	}
	waitFor(ctx, t, "the program to complete", func() bool {
		g := connect.NewRequest(&toolfleetv1.GetProgramRequest{ProgramId: progID})
		g.Header().Set("Authorization", preq.Header().Get("Authorization"))
		got, err := progs.GetProgram(ctx, g)
		return err == nil && got.Msg.GetStatus() == toolfleetv1.ProgramStatus_PROGRAM_STATUS_COMPLETED
	})
	waitFor(ctx, t, "the program's stream to end", func() bool { return strings.Contains(streamed.String(), "event: end") })
	live := streamed.String()
	for _, want := range []string{"event: summary", `id="program-questions"`, "event: calls", "Conformance.InputRequiredElicitation",
		`id="program-status">completed<`, "event: end\ndata: completed"} {
		if !strings.Contains(live, want) {
			t.Errorf("the program's live stream lacks %q:\n%s", want, live)
		}
	}
	if _, body := alice.get("/console/inbox"); strings.Contains(body, "What is your name?") || !strings.Contains(body, "Nothing waits for you.") {
		t.Errorf("the inbox still shows a question after both were answered:\n%s", body)
	}
}
