package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// linker is a Tasks whose task waits for a connection, and that makes
// connect links (or fails to).
type linker struct {
	answerRecorder
	fail  bool
	asked []string
}

func (l *linker) ConnectLink(_ context.Context, provider string, scopes []string) (string, error) {
	l.asked = append(l.asked, provider+" "+strings.Join(scopes, ","))
	if l.fail {
		return "", errors.New("no connections")
	}
	return "http://127.0.0.1:8080/connections/start?state=abc", nil
}

// A task waiting for a connection shows the link: a url-mode elicitation to
// a client that declared elicitation.url, the link in a form's message to
// any other, and without a link only what to run.
func TestTaskConnectItem(t *testing.T) {
	t.Parallel()
	s := New(nil, Options{})
	const msg = "connect your acme account: run `toolfleet connections connect acme --scope profile`"
	tb := &linker{answerRecorder: answerRecorder{st: &TaskState{ID: "mcp-r-1", Status: TaskInputRequired, CreatedAt: time.Now(),
		Questions: []TaskQuestion{{CallID: "mcp-r-1/1/0", Key: "connect", Message: msg, Provider: "acme", Scopes: []string{"profile"}}}}}}
	request := func(rev revision) map[string]any {
		t.Helper()
		tb.st.Questions[0].URL = "" // as a fresh read of the task
		out, jerr := s.getTask(t.Context(), tb, "mcp-r-1", rev)
		if jerr != nil {
			t.Fatal(jerr)
		}
		b, _ := json.Marshal(out.(map[string]any)["inputRequests"])
		var reqs map[string]map[string]any
		if err := json.Unmarshal(b, &reqs); err != nil || len(reqs) != 1 {
			t.Fatalf("inputRequests %s (%v)", b, err)
		}
		return reqs["toolfleet/input/mcp-r-1/1/0#connect"]
	}
	q := request(revision{extension: true, declared: true, caps: []string{"elicitation"}, urlElicitation: true})
	if dig(q, "params", "mode") != "url" || dig(q, "params", "url") != "http://127.0.0.1:8080/connections/start?state=abc" ||
		dig(q, "params", "message") != msg || dig(q, "params", "elicitationId") == nil {
		t.Fatalf("to a client with elicitation.url: %v", q)
	}
	if strings.Join(tb.asked, "|") != "acme profile" {
		t.Fatalf("links asked for %q", tb.asked)
	}
	q = request(revision{extension: true, declared: true, caps: []string{"elicitation"}})
	if m, _ := dig(q, "params", "message").(string); dig(q, "params", "mode") != "form" || !strings.Contains(m, "Connect at http://127.0.0.1:8080/connections/start?state=abc") {
		t.Fatalf("to a client without elicitation.url: %v", q)
	}
	tb.fail = true
	q = request(revision{extension: true, declared: true, caps: []string{"elicitation"}, urlElicitation: true})
	if dig(q, "params", "mode") != "form" || dig(q, "params", "message") != msg {
		t.Fatalf("without a link: %v", q)
	}
}

func TestRevisionReadsURLElicitation(t *testing.T) {
	t.Parallel()
	for caps, want := range map[string]bool{
		`{"elicitation":{"url":{}}}`:           true,
		`{"elicitation":{"form":{},"url":{}}}`: true,
		`{"elicitation":{}}`:                   false,
		`{"elicitation":{"url":null}}`:         false,
		`{"sampling":{}}`:                      false,
		`{"elicitation":"url"}`:                false,
	} {
		rev, _ := revisionOf(map[string]json.RawMessage{metaClientCaps: json.RawMessage(caps)})
		if rev.urlElicitation != want {
			t.Errorf("%s: urlElicitation %v, want %v", caps, rev.urlElicitation, want)
		}
	}
}
