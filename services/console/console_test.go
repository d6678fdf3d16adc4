package console

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
)

// TestSecurityHeaders: every response, pages, assets and errors alike,
// carries the CSP and the other headers.
func TestSecurityHeaders(t *testing.T) {
	t.Parallel()
	s, err := New(Config{DevSecret: []byte("secret")})
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/console/signin", "/console/assets/console.css", "/console/assets/console.js", "/console/nope", "/console/runs"} {
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://127.0.0.1"+path, nil))
		h := rec.Result().Header
		if h.Get("Content-Security-Policy") != ContentSecurityPolicy || h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Referrer-Policy") != "no-referrer" {
			t.Errorf("GET %s: headers %v", path, h)
		}
	}
}

// TestCSRF: a POST without the session's token, or with another's, is
// refused before anything runs; with it, the sign-in goes on.
func TestCSRF(t *testing.T) {
	t.Parallel()
	s, err := New(Config{DevSecret: []byte("secret")})
	if err != nil {
		t.Fatal(err)
	}
	get := httptest.NewRecorder()
	s.ServeHTTP(get, httptest.NewRequest(http.MethodGet, "http://127.0.0.1/console/signin", nil))
	cookie := get.Result().Cookies()[0]
	token := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(get.Body.String())[1]
	post := func(csrf string) *httptest.ResponseRecorder {
		form := url.Values{"subject": {"alice"}, "scope": {"runs:read"}}
		if csrf != "" {
			form.Set("csrf", csrf)
		}
		req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1/console/signin", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.AddCookie(cookie)
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		return rec
	}
	for _, bad := range []string{"", "forged", token + "x"} {
		if rec := post(bad); rec.Code != http.StatusForbidden {
			t.Errorf("sign-in with CSRF %q: %d, want 403", bad, rec.Code)
		}
	}
	rec := post(token)
	if rec.Code != http.StatusSeeOther {
		t.Fatalf("sign-in with its CSRF token: %d\n%s", rec.Code, rec.Body)
	}
	if c := rec.Result().Cookies(); len(c) < 2 || c[len(c)-1].Value == cookie.Value {
		t.Errorf("sign-in kept the session id (fixation): %v", c)
	}
}

// TestWriteSSE: no payload line break (\r, \n, \r\n) can start an SSE field.
func TestWriteSSE(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	if err := writeSSE(rec, "7", "entry", "a\rid: 99\r\nevent: end\ndata: x"); err != nil {
		t.Fatal(err)
	}
	want := "id: 7\nevent: entry\ndata: a\ndata: id: 99\ndata: event: end\ndata: data: x\n\n"
	if got := rec.Body.String(); got != want {
		t.Errorf("writeSSE wrote %q, want %q", got, want)
	}
}

// TestFragmentsEscape: payloads in the live fragments stay text.
func TestFragmentsEscape(t *testing.T) {
	t.Parallel()
	s, err := New(Config{AuthOff: true})
	if err != nil {
		t.Fatal(err)
	}
	hostile := `<script>alert(1)</script><img src=x onerror=alert(2)><a href="javascript:alert(3)">x</a>`
	html, err := s.fragment("event", eventView{Kind: "turn", Label: "Model turn", Message: hostile, ToolID: hostile, CallID: hostile})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(html, "<script>") || strings.Contains(html, "<img") || strings.Contains(html, `<a href="javascript`) {
		t.Errorf("the event fragment holds live markup:\n%s", html)
	}
	html, err = s.fragment("approval", approvalForm{A: approvalView{Kind: "run", OwnerID: hostile, OwnerURL: "javascript:alert(1)",
		DecideURL: "javascript:alert(2)", CallID: hostile, ToolID: hostile, Arguments: hostile}, CSRF: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(html, "<script>") || strings.Contains(html, "<img") || strings.Contains(html, `"javascript:`) {
		t.Errorf("the approval fragment holds live markup:\n%s", html)
	}
}

// TestNotConnected: pages answer 503 until the gateway's address is set.
func TestNotConnected(t *testing.T) {
	t.Parallel()
	s, err := New(Config{AuthOff: true})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://127.0.0.1/console/runs", nil))
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "starting") {
		t.Errorf("before Connect: %d\n%s", rec.Code, rec.Body)
	}
}
