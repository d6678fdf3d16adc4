package hydralogin

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// The refusals below happen before the admin API is called; the flows with
// Hydra itself are tested on a real Hydra in e2e/oauth/devlogin.

func newTestApp(t *testing.T) http.Handler {
	t.Helper()
	// A closed port: any call to the admin API would fail with 502, which
	// these tests would notice.
	admin, err := NewAdmin("http://127.0.0.1:1", nil)
	if err != nil {
		t.Fatal(err)
	}
	return New(admin, nil).Handler()
}

func do(h http.Handler, method, target, host string, form url.Values, cookie *http.Cookie) *httptest.ResponseRecorder {
	var body *strings.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	} else {
		body = strings.NewReader("")
	}
	r := httptest.NewRequest(method, target, body)
	r.Host = host
	if form != nil {
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if cookie != nil {
		r.AddCookie(cookie)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestForeignHostRefused(t *testing.T) {
	h := newTestApp(t)
	for _, host := range []string{"evil.example", "evil.example:3000", "10.0.0.1:3000", "127.0.0.1.nip.io:3000"} {
		if w := do(h, http.MethodGet, "/", host, nil, nil); w.Code != http.StatusMisdirectedRequest {
			t.Errorf("Host %s: %d, want 421", host, w.Code)
		}
	}
	for _, host := range []string{"127.0.0.1:3000", "localhost:3000", "[::1]:3000", "LOCALHOST"} {
		w := do(h, http.MethodGet, "/", host, nil, nil)
		if w.Code != http.StatusOK {
			t.Errorf("Host %s: %d, want 200", host, w.Code)
		}
		if csp := w.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "frame-ancestors 'none'") {
			t.Errorf("CSP %q", csp)
		}
	}
}

func TestFormsNeedTheCSRFCookie(t *testing.T) {
	h := newTestApp(t)
	tok := strings.Repeat("ab", 32)
	form := url.Values{"challenge": {"c"}, "csrf": {tok}, "subject": {"alice"}, "action": {"accept"}}
	for _, path := range []string{"/login", "/consent"} {
		if w := do(h, http.MethodPost, path, "127.0.0.1:3000", form, nil); w.Code != http.StatusForbidden {
			t.Errorf("%s without cookie: %d, want 403", path, w.Code)
		}
		other := &http.Cookie{Name: csrfCookie, Value: strings.Repeat("cd", 32)}
		if w := do(h, http.MethodPost, path, "127.0.0.1:3000", form, other); w.Code != http.StatusForbidden {
			t.Errorf("%s with another cookie: %d, want 403", path, w.Code)
		}
	}
	// With the cookie, a bad name is refused before Hydra is asked.
	bad := url.Values{"challenge": {"c"}, "csrf": {tok}, "subject": {"a b<script>"}, "action": {"accept"}}
	if w := do(h, http.MethodPost, "/login", "127.0.0.1:3000", bad, &http.Cookie{Name: csrfCookie, Value: tok}); w.Code != http.StatusBadRequest {
		t.Errorf("bad subject: %d, want 400", w.Code)
	}
}

func TestPagesWithoutChallenge(t *testing.T) {
	h := newTestApp(t)
	for _, path := range []string{"/login", "/consent", "/logout"} {
		w := do(h, http.MethodGet, path, "127.0.0.1:3000", nil, nil)
		if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "through Hydra") {
			t.Errorf("%s without a challenge: %d %q", path, w.Code, w.Body)
		}
	}
}

func TestBigFormRefused(t *testing.T) {
	h := newTestApp(t)
	tok := strings.Repeat("ab", 32)
	form := url.Values{"csrf": {tok}, "pad": {strings.Repeat("x", 64<<10)}}
	if w := do(h, http.MethodPost, "/login", "127.0.0.1:3000", form, &http.Cookie{Name: csrfCookie, Value: tok}); w.Code != http.StatusBadRequest {
		t.Errorf("64 KiB form: %d, want 400", w.Code)
	}
}

func TestNewAdminRefusesBadURL(t *testing.T) {
	for _, u := range []string{"", "127.0.0.1:4445", "ftp://x", "http://"} {
		if _, err := NewAdmin(u, nil); err == nil {
			t.Errorf("NewAdmin(%q) accepted", u)
		}
	}
}
