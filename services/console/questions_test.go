package console

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

const hostileText = `<script>alert(1)</script><img src=x onerror=alert(2)><a href="javascript:alert(3)">x</a>`

// TestQuestionFragment: a question renders its message and a form made by
// the try-it generator (one input per property, the three answers), and a
// hostile message, key, property name, description or enum stays text.
func TestQuestionFragment(t *testing.T) {
	t.Parallel()
	s, err := New(Config{AuthOff: true})
	if err != nil {
		t.Fatal(err)
	}
	schema, err := structpb.NewStruct(map[string]any{"type": "object", "required": []any{"name"},
		"properties": map[string]any{
			"name":      map[string]any{"type": "string", "description": hostileText},
			"size":      map[string]any{"type": "string", "enum": []any{"small", hostileText}},
			"ok":        map[string]any{"type": "boolean"},
			hostileText: map[string]any{"type": "integer"},
		}})
	if err != nil {
		t.Fatal(err)
	}
	qs := questionViews("run", "run-1", []*toolfleetv1.PendingQuestion{{CallId: "run-1/1/0", ToolId: "T.Ask", Key: hostileText,
		Message: hostileText, RequestedSchema: schema, RequestedAt: timestamppb.Now()}})
	qs[0].Problem = hostileText
	html, err := s.fragment("inbox-items", inboxData{Items: questionItems(qs), CSRF: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`action="/console/runs/run-1/answer"`, `name="csrf" value="tok"`, `name="call_id" value="run-1/1/0"`,
		`name="in.name"`, `<select name="in.size">`, `type="checkbox" name="in.ok"`,
		`value="accept"`, `value="decline"`, `value="cancel"`, "&lt;script&gt;alert(1)&lt;/script&gt;"} {
		if !strings.Contains(html, want) {
			t.Errorf("the question lacks %s:\n%s", want, html)
		}
	}
	if strings.Contains(html, "<script>") || strings.Contains(html, "<img") || strings.Contains(html, `href="javascript`) {
		t.Errorf("the question fragment holds live markup:\n%s", html)
	}
}

// TestQuestionViewsLinks: a program's question answers to the program.
func TestQuestionViewsLinks(t *testing.T) {
	t.Parallel()
	v := questionViews("program", "prog 1", []*toolfleetv1.PendingQuestion{{CallId: "c", Key: "k"}})[0]
	if v.OwnerURL != "/console/programs/prog%201" || v.AnswerURL != "/console/programs/prog%201/answer" {
		t.Errorf("program question links: %q %q", v.OwnerURL, v.AnswerURL)
	}
}

// TestFindQuestion: the key names the question; no key names a call's only one.
func TestFindQuestion(t *testing.T) {
	t.Parallel()
	one := []*toolfleetv1.PendingQuestion{{CallId: "c1", Key: "a"}, {CallId: "c2", Key: "x"}, {CallId: "c2", Key: "y"}}
	for _, tc := range []struct {
		call, key, want string
	}{{"c1", "a", "a"}, {"c1", "", "a"}, {"c2", "y", "y"}, {"c2", "", ""}, {"c1", "b", ""}, {"c3", "", ""}} {
		got := findQuestion(one, tc.call, tc.key)
		if got.GetKey() != tc.want {
			t.Errorf("findQuestion(%s, %q) = %q, want %q", tc.call, tc.key, got.GetKey(), tc.want)
		}
	}
}

// TestInboxKeyQuestions: a question answered or added changes what the
// live inbox sends.
func TestInboxKeyQuestions(t *testing.T) {
	t.Parallel()
	a := inboxData{Items: questionItems(questionViews("run", "r", []*toolfleetv1.PendingQuestion{{CallId: "c", Key: "k1"}}))}
	b := inboxData{Items: questionItems(questionViews("run", "r", []*toolfleetv1.PendingQuestion{{CallId: "c", Key: "k2"}}))}
	if inboxKey(a) == inboxKey(b) || inboxKey(a) == inboxKey(inboxData{}) {
		t.Error("the live inbox's key does not tell questions apart")
	}
}

// TestAnswerNeedsCSRF: an answer without the session's CSRF token is
// refused before any API is called.
func TestAnswerNeedsCSRF(t *testing.T) {
	t.Parallel()
	s, err := New(Config{AuthOff: true})
	if err != nil {
		t.Fatal(err)
	}
	s.Connect("http://127.0.0.1:1") // never called: the refusal comes first
	get := httptest.NewRecorder()
	s.ServeHTTP(get, httptest.NewRequest(http.MethodGet, "http://127.0.0.1/console/nope", nil))
	cookies := get.Result().Cookies()
	for _, path := range []string{"/console/runs/run-1/answer", "/console/programs/p-1/answer"} {
		form := url.Values{"call_id": {"c"}, "action": {"accept"}, "in.name": {"x"}, "csrf": {"forged"}}
		req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1"+path, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for _, c := range cookies {
			req.AddCookie(c)
		}
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		if rec.Code != http.StatusForbidden {
			t.Errorf("POST %s with a forged CSRF token: %d, want 403", path, rec.Code)
		}
	}
}

// TestConnectionFragment: a call waiting for a connection renders a
// "Connect PROVIDER" button posting (with the CSRF token) to the
// connections page's connect, which starts a fresh flow, and an answer
// form with no fields; a hostile provider stays text.
func TestConnectionFragment(t *testing.T) {
	t.Parallel()
	s, err := New(Config{AuthOff: true})
	if err != nil {
		t.Fatal(err)
	}
	qs := questionViews("run", "run-1", []*toolfleetv1.PendingQuestion{{CallId: "run-1/1/0", ToolId: "GitHub.Issues", Key: "connect",
		Method: "toolfleet/connect", Message: "connect your github account", ConnectProvider: "github", ConnectScopes: []string{"repo", "read:user"},
		RequestedAt: timestamppb.Now()}})
	html, err := s.fragment("inbox-items", inboxData{Items: questionItems(qs), CSRF: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`action="/console/connections/connect"`, `name="provider" value="github"`, `name="scope" value="read:user"`,
		"Connect github", `action="/console/runs/run-1/answer"`, `name="csrf" value="tok"`, `value="accept"`, `value="decline"`} {
		if !strings.Contains(html, want) {
			t.Errorf("the connection item lacks %s:\n%s", want, html)
		}
	}
	if strings.Contains(html, `name="in.`) {
		t.Errorf("the connection item asks for fields:\n%s", html)
	}
	qs = questionViews("run", "run-1", []*toolfleetv1.PendingQuestion{{CallId: "c", Key: "connect", ConnectProvider: hostileText}})
	html, err = s.fragment("inbox-items", inboxData{Items: questionItems(qs), CSRF: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(html, "<script>") || strings.Contains(html, "<img") {
		t.Errorf("the connection item holds live markup:\n%s", html)
	}
}
