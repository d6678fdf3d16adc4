// Package devlogin tests `toolfleet dev hydra-login`'s pages
// (internal/hydralogin) in front of a real Ory Hydra: a person signs in with
// the name they type, grants only the scopes they tick, can cancel, and a
// forged form cannot widen what is granted.
package devlogin

import (
	"context"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/oauth2"

	"github.com/toolfleet/toolfleet/e2e/oauth/hydratest"
	"github.com/toolfleet/toolfleet/internal/hydralogin"
)

// fleet is a Hydra whose logins and consents go to the app under test.
type fleet struct {
	hydra  *hydratest.Server
	client hydratest.Client
	app    string
}

func start(t *testing.T) fleet {
	t.Helper()
	// The app needs Hydra's admin URL and Hydra needs the app's URL: serve
	// the app first behind a handler that is filled in once Hydra runs.
	var h http.Handler = http.NotFoundHandler()
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.ServeHTTP(w, r) }))
	t.Cleanup(app.Close)
	hy := hydratest.Start(t, hydratest.Options{LoginApp: app.URL})
	admin, err := hydralogin.NewAdmin(hy.AdminURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	h = hydralogin.New(admin, nil).Handler()
	cl := hy.ConfidentialClient(t, "http://127.0.0.1:1/callback", []string{"openid", "offline_access", "tickets:read"})
	return fleet{hydra: hy, client: cl, app: app.URL}
}

// form is a page's form: where it posts and its hidden fields.
type form struct {
	action string
	fields url.Values
	body   string
}

var (
	formAction = regexp.MustCompile(`<form method="post" action="([^"]+)">`)
	hidden     = regexp.MustCompile(`<input type="hidden" name="([a-z]+)" value="([^"]*)">`)
)

// open follows redirects from u until a page of the app answers; it returns
// its form.
func open(t *testing.T, ctx context.Context, browser *http.Client, u, app string) form {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	resp, err := browser.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Request.URL.String(), app) {
		t.Fatalf("GET %s ended at %s with %s: %s", u, resp.Request.URL, resp.Status, b)
	}
	if got := resp.Header.Get("Content-Security-Policy"); !strings.Contains(got, "default-src 'none'") {
		t.Errorf("page CSP = %q", got)
	}
	return parseForm(t, resp.Request.URL, string(b))
}

func parseForm(t *testing.T, at *url.URL, page string) form {
	t.Helper()
	m := formAction.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no form on %s:\n%s", at, page)
	}
	f := form{action: at.ResolveReference(&url.URL{Path: m[1]}).String(), fields: url.Values{}, body: page}
	for _, h := range hidden.FindAllStringSubmatch(page, -1) {
		f.fields.Set(h[1], html.UnescapeString(h[2]))
	}
	return f
}

// submit posts f with extra fields and follows the redirects: to the next
// page of the app (its form) or to the client's callback (returned).
func submit(t *testing.T, ctx context.Context, browser *http.Client, f form, extra url.Values, app, callback string) (*form, *url.URL) {
	t.Helper()
	v := url.Values{}
	for k, vs := range f.fields {
		v[k] = vs
	}
	for k, vs := range extra {
		v[k] = vs
	}
	c := *browser
	var cb *url.URL
	c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if strings.HasPrefix(req.URL.String(), callback) {
			cb = req.URL
			return http.ErrUseLastResponse
		}
		if len(via) > 20 {
			return fmt.Errorf("too many redirects")
		}
		return nil
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.action, strings.NewReader(v.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if cb != nil {
		return nil, cb
	}
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Request.URL.String(), app) {
		t.Fatalf("POST %s ended at %s with %s: %s", f.action, resp.Request.URL, resp.Status, b)
	}
	next := parseForm(t, resp.Request.URL, string(b))
	return &next, nil
}

func authURL(f fleet, hint string) (string, *oauth2.Config, string) {
	cfg := f.client.Config()
	cfg.Scopes = []string{"openid", "offline_access", "tickets:read"}
	verifier := oauth2.GenerateVerifier()
	opts := []oauth2.AuthCodeOption{oauth2.S256ChallengeOption(verifier)}
	if hint != "" {
		opts = append(opts, oauth2.SetAuthURLParam("login_hint", hint))
	}
	return cfg.AuthCodeURL("state-0123456789abcdef", opts...), cfg, verifier
}

func TestSignInAsTypedNameGrantsTickedScopes(t *testing.T) {
	f := start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	browser := hydratest.NewBrowser()
	u, cfg, verifier := authURL(f, "carol")

	login := open(t, ctx, browser, u, f.app)
	if !strings.Contains(login.body, `value="carol"`) {
		t.Errorf("the login page does not suggest the login_hint carol:\n%s", login.body)
	}
	consent, cb := submit(t, ctx, browser, login, url.Values{"subject": {"bob"}, "action": {"accept"}}, f.app, f.client.RedirectURI)
	if consent == nil {
		t.Fatalf("no consent page; callback %s", cb)
	}
	for _, s := range []string{"openid", "offline_access", "tickets:read"} {
		if !strings.Contains(consent.body, `value="`+s+`" checked`) {
			t.Errorf("consent page does not list %s ticked", s)
		}
	}
	// Tick openid and tickets:read, and forge a scope the client never asked for.
	_, cb = submit(t, ctx, browser, *consent, url.Values{"scope": {"openid", "tickets:read", "admin:all"}, "action": {"accept"}},
		f.app, f.client.RedirectURI)
	code, _, err := hydratest.CodeFrom(cb)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := cfg.Exchange(ctx, code, oauth2.VerifierOption(verifier))
	if err != nil {
		t.Fatal(err)
	}
	if tok.RefreshToken != "" {
		t.Error("a refresh token came although offline_access was not ticked")
	}
	in, err := f.hydra.Introspect(ctx, tok.AccessToken)
	if err != nil {
		t.Fatal(err)
	}
	if !in.Active || in.Subject != "bob" {
		t.Fatalf("introspection = %+v, want active for bob", in)
	}
	got := in.Scopes()
	slices.Sort(got)
	if !slices.Equal(got, []string{"openid", "tickets:read"}) {
		t.Errorf("granted scopes = %v, want [openid tickets:read] (ticked, nothing forged)", got)
	}
}

func TestCancelAndDeny(t *testing.T) {
	f := start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	u, _, _ := authURL(f, "")
	browser := hydratest.NewBrowser()
	login := open(t, ctx, browser, u, f.app)
	if _, cb := submit(t, ctx, browser, login, url.Values{"action": {"deny"}}, f.app, f.client.RedirectURI); cb == nil || cb.Query().Get("error") != "access_denied" {
		t.Errorf("cancel at login: callback %v, want error=access_denied", cb)
	}

	u, _, _ = authURL(f, "")
	browser = hydratest.NewBrowser()
	login = open(t, ctx, browser, u, f.app)
	consent, _ := submit(t, ctx, browser, login, url.Values{"subject": {"dave"}, "action": {"accept"}}, f.app, f.client.RedirectURI)
	if consent == nil {
		t.Fatal("no consent page")
	}
	if _, cb := submit(t, ctx, browser, *consent, url.Values{"action": {"deny"}}, f.app, f.client.RedirectURI); cb == nil || cb.Query().Get("error") != "access_denied" {
		t.Errorf("deny at consent: callback %v, want error=access_denied", cb)
	}
}

func TestRefusals(t *testing.T) {
	f := start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	u, _, _ := authURL(f, "")
	browser := hydratest.NewBrowser()
	login := open(t, ctx, browser, u, f.app)

	post := func(c *http.Client, v url.Values, host string) (int, string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, login.action, strings.NewReader(v.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if host != "" {
			req.Host = host
		}
		c2 := *c
		c2.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		resp, err := c2.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		return resp.StatusCode, string(b)
	}
	ok := url.Values{"subject": {"eve"}, "action": {"accept"}, "challenge": {login.fields.Get("challenge")}, "csrf": {login.fields.Get("csrf")}}

	// Another browser (a cross-site form: no SameSite=Strict cookie) with the right token.
	if code, _ := post(&http.Client{}, ok, ""); code != http.StatusForbidden {
		t.Errorf("POST without the CSRF cookie = %d, want 403", code)
	}
	// DNS rebinding: the right browser, a foreign Host.
	if code, _ := post(browser, ok, "evil.example:80"); code != http.StatusMisdirectedRequest {
		t.Errorf("POST with Host evil.example = %d, want 421", code)
	}
	bad := url.Values{}
	for k, v := range ok {
		bad[k] = v
	}
	bad.Set("subject", "<script>")
	if code, _ := post(browser, bad, ""); code != http.StatusBadRequest {
		t.Errorf("POST with subject <script> = %d, want 400", code)
	}
	bad.Set("subject", "eve")
	bad.Set("challenge", "made-up")
	if code, body := post(browser, bad, ""); code != http.StatusBadRequest || strings.Contains(body, "hydra admin") {
		t.Errorf("POST with a made-up challenge = %d %q, want 400 without Hydra's answer", code, body)
	}
	// The real one still works: the refusals used nothing up.
	if code, _ := post(browser, ok, ""); code != http.StatusSeeOther {
		t.Errorf("the right POST = %d, want 303", code)
	}
}
