package signin_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/e2e/oauth/hydratest"

	"github.com/toolfleet/toolfleet/e2e/devproc"
)

// script is the scripted model of the run a signed-in person starts: a tool
// call (the orchestrator calls the gateway with the fleet's own HS256 token
// on the person's behalf) and an answer.
const script = `turns:
  - text: 'Adding 2 and 3.'
    calls:
      - tool: Calculator.Add
        id: sum
        args: {a: 2, b: 3}
  - text: 'The sum is ${sum.result}.'
`

const (
	clientID = "toolfleet-console"
	audience = "toolfleet"
)

// scopes are what the console asks for and the client may have.
var scopes = []string{"openid", "offline_access", "runs:start", "runs:read", "tools:call"}

// TestConsoleSignInWithOIDC: people sign in to the console of a real
// `toolfleet dev` at Hydra (code + PKCE, real redirects), start a run whose
// tool call goes through the gateway, see it complete in their runs list,
// and not see another person's; a callback with a wrong state, a replayed
// one (with and without its flow cookie) and one whose ID token carries
// another nonce sign nobody in; sign-out ends the session; a session
// refreshes its access token before it expires, and one without a refresh
// token ends with it.
func TestConsoleSignInWithOIDC(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	var refreshes atomic.Int64
	hook := hydratest.ServeTokenHook(t, func(r hydratest.TokenRequest) map[string]any {
		if r.ClientID == clientID && slices.Contains(r.Payload["grant_type"], "refresh_token") {
			refreshes.Add(1)
		}
		return nil
	})
	// Access tokens live 45 s: the console renews them 30 s before expiry.
	h := hydratest.Start(t, hydratest.Options{AccessTokenTTL: 45 * time.Second, TokenHookURL: hook})
	secret := "console-secret-" + fmt.Sprint(time.Now().UnixNano())
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "client-secret")
	if err := os.WriteFile(secretFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := startDev(ctx, t, dir, "--gateway-jwt-secret", "oidc-test-secret-oidc-test-secret",
		"--gateway-jwks-url", h.JWKSURL(), "--gateway-jwt-audience", audience,
		"--console-oidc-issuer", h.Issuer, "--console-oidc-client-id", clientID,
		"--console-oidc-client-secret-file", secretFile, "--console-oidc-scopes", strings.Join(scopes, ","),
		"--console-oidc-audience", audience)
	callback := base + "/console/oidc/callback"
	if _, err := h.CreateClient(ctx, hydratest.ClientSpec{ID: clientID, Secret: secret, RedirectURIs: []string{callback},
		Scopes: scopes, Audience: []string{audience}}); err != nil {
		t.Fatal(err)
	}

	// Sign in as ada through the sign-in page's link, Hydra and the provider.
	ada := newBrowser(t, base)
	if _, body := ada.get(ctx, "/console/signin"); !strings.Contains(body, `id="oidc-signin"`) {
		t.Fatalf("the sign-in page offers no OpenID Connect sign-in:\n%s", body)
	}
	ada.signIn(ctx, h, "ada")

	// Start a run from the runs page and see it complete in ada's list.
	_, runs := ada.get(ctx, "/console/runs")
	resp := ada.post(ctx, "/console/runs", url.Values{"csrf": {csrfOf(t, runs)}, "model": {"scripted:add.yaml"},
		"tools": {"Calculator.*"}, "prompt": {"add 2 and 3"}})
	runID, ok := strings.CutPrefix(resp.Request.URL.Path, "/console/runs/")
	if resp.StatusCode != http.StatusOK || !ok || runID == "" {
		t.Fatalf("starting a run: %s at %s", resp.Status, resp.Request.URL)
	}
	completed := func(body string) bool { return rowHas(body, runID, ">completed<") }
	waitFor(ctx, t, "ada's run to complete in her runs list", func() (bool, string) {
		_, body := ada.get(ctx, "/console/runs")
		return completed(body), body
	})

	// bob signs in at the same provider and sees none of it.
	bob := newBrowser(t, base)
	bob.signIn(ctx, h, "bob")
	if _, body := bob.get(ctx, "/console/runs"); strings.Contains(body, runID) {
		t.Errorf("bob's runs list shows ada's run %s", runID)
	}
	if status, _ := bob.get(ctx, "/console/runs/"+url.PathEscape(runID)); status != http.StatusNotFound {
		t.Errorf("bob opening ada's run: %d, want 404", status)
	}

	t.Run("wrong state", func(t *testing.T) {
		b := newBrowser(t, base)
		cb := b.authorize(ctx, "/console/oidc/start", callback)
		q := cb.Query()
		q.Set("state", q.Get("state")+"x")
		cb.RawQuery = q.Encode()
		b.refused(ctx, cb.String())
	})
	t.Run("replayed code", func(t *testing.T) {
		b := newBrowser(t, base)
		cb := b.authorize(ctx, "/console/oidc/start", callback)
		flowCookies := b.jar.Cookies(cb)
		if status, body := b.getURL(ctx, cb.String()); status != http.StatusOK || !strings.Contains(body, "Signed in") {
			t.Fatalf("the first callback: %d\n%s", status, body)
		}
		other := newBrowser(t, base)
		other.refused(ctx, cb.String()) // in a browser that did not start it
		b.jar.SetCookies(cb, flowCookies)
		if status, body := b.getURL(ctx, cb.String()); status != http.StatusBadRequest || !strings.Contains(body, "did not accept this sign-in") {
			t.Errorf("the code replayed with its flow cookie: %d, want 400 from the provider's refusal\n%s", status, body)
		}
	})
	t.Run("wrong nonce", func(t *testing.T) {
		b := newBrowser(t, base)
		authURL := b.startOnly(ctx)
		q := authURL.Query()
		if q.Get("nonce") == "" || q.Get("code_challenge_method") != "S256" || q.Get("state") == "" {
			t.Fatalf("the console's authorization request lacks a nonce, S256 PKCE or state: %s", authURL)
		}
		q.Set("nonce", "a-nonce-the-console-never-made")
		authURL.RawQuery = q.Encode()
		cb, err := hydratest.Authorize(ctx, b.Client, authURL.String(), callback)
		if err != nil {
			t.Fatal(err)
		}
		b.refused(ctx, cb.String())
	})
	t.Run("sign-out", func(t *testing.T) {
		b := newBrowser(t, base)
		b.signIn(ctx, h, "carol")
		_, body := b.get(ctx, "/console/runs")
		if resp := b.post(ctx, "/console/signout", url.Values{"csrf": {csrfOf(t, body)}}); !strings.HasSuffix(resp.Request.URL.Path, "/console/signin") {
			t.Fatalf("sign-out ended at %s", resp.Request.URL)
		}
		b.signedOut(ctx)
	})

	// Expiry: ada's session (with a refresh token) renews its access token;
	// dave's (the provider withheld offline_access: no refresh token) ends.
	h.Provider.Withhold("offline_access")
	dave := newBrowser(t, base)
	dave.signIn(ctx, h, "dave")
	h.Provider.Withhold()
	before := refreshes.Load()
	waitFor(ctx, t, "ada's session to refresh its access token", func() (bool, string) {
		status, body := ada.get(ctx, "/console/runs")
		return status == http.StatusOK && refreshes.Load() > before, body
	})
	if status, body := ada.get(ctx, "/console/runs"); status != http.StatusOK || !completed(body) {
		t.Errorf("after the refresh ada's runs list: %d\n%s", status, body)
	}
	waitFor(ctx, t, "dave's session to end with its access token", func() (bool, string) {
		status, body := dave.get(ctx, "/console/runs")
		return status == http.StatusOK && strings.Contains(body, `id="oidc-signin"`), body
	})
}

// browser is a person's browser: a cookie jar and the console's address.
type browser struct {
	*http.Client
	jar  *cookiejar.Jar
	base string
	t    *testing.T
}

func newBrowser(t *testing.T, base string) *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{Client: &http.Client{Jar: jar, Timeout: 30 * time.Second}, jar: jar, base: base, t: t}
}

func (b *browser) get(ctx context.Context, path string) (int, string) {
	return b.getURL(ctx, b.base+path)
}

func (b *browser) getURL(ctx context.Context, u string) (int, string) {
	b.t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		b.t.Fatal(err)
	}
	resp, err := b.Do(req)
	if err != nil {
		b.t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(body)
}

func (b *browser) post(ctx context.Context, path string, form url.Values) *http.Response {
	b.t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.base+path, strings.NewReader(form.Encode()))
	if err != nil {
		b.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := b.Do(req)
	if err != nil {
		b.t.Fatalf("POST %s: %v", path, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// signIn signs in as subject: the console's sign-in link, Hydra, the
// provider, the console's callback, then the runs page shows the subject.
func (b *browser) signIn(ctx context.Context, h *hydratest.Server, subject string) {
	b.t.Helper()
	h.Provider.SetSubject(subject)
	status, body := b.get(ctx, "/console/oidc/start")
	if status != http.StatusOK || !strings.Contains(body, "Signed in as <code>"+subject+"</code>") {
		b.t.Fatalf("sign-in as %s: %d\n%s", subject, status, body)
	}
	status, body = b.get(ctx, "/console/runs")
	if status != http.StatusOK || !strings.Contains(body, subject) || strings.Contains(body, `id="oidc-signin"`) {
		b.t.Fatalf("after signing in as %s the runs page: %d\n%s", subject, status, body)
	}
}

// authorize runs a sign-in from the console's start path up to the
// callback, which it returns without opening.
func (b *browser) authorize(ctx context.Context, start, callback string) *url.URL {
	b.t.Helper()
	cb, err := hydratest.Authorize(ctx, b.Client, b.base+start, callback)
	if err != nil {
		b.t.Fatal(err)
	}
	if _, _, err := hydratest.CodeFrom(cb); err != nil {
		b.t.Fatal(err)
	}
	return cb
}

// startOnly opens the console's sign-in start and returns the
// authorization request it redirects to (its flow cookie is in the jar).
func (b *browser) startOnly(ctx context.Context) *url.URL {
	b.t.Helper()
	c := *b.Client
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, b.base+"/console/oidc/start", nil)
	resp, err := c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	resp.Body.Close()
	var flow *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == "toolfleet_console_oidc" {
			flow = c
		}
	}
	if flow == nil || !flow.HttpOnly || flow.SameSite != http.SameSiteLaxMode || flow.Path != "/console/oidc/" || flow.MaxAge <= 0 || flow.MaxAge > 600 {
		b.t.Errorf("the sign-in's flow cookie: %+v (want HttpOnly, SameSite=Lax, Path=/console/oidc/, at most 10 minutes)", flow)
	}
	u, err := resp.Location()
	if err != nil {
		b.t.Fatalf("the sign-in start did not redirect (%s): %v", resp.Status, err)
	}
	return u
}

// refused opens a callback that must sign nobody in.
func (b *browser) refused(ctx context.Context, callback string) {
	b.t.Helper()
	if status, body := b.getURL(ctx, callback); status != http.StatusBadRequest {
		b.t.Errorf("callback %s: %d, want 400\n%s", callback, status, body)
	}
	b.signedOut(ctx)
}

// signedOut checks that the console sends this browser to sign in.
func (b *browser) signedOut(ctx context.Context) {
	b.t.Helper()
	if status, body := b.get(ctx, "/console/runs"); status != http.StatusOK || !strings.Contains(body, `id="oidc-signin"`) {
		b.t.Errorf("the runs page of a browser that is not signed in: %d\n%s", status, body)
	}
}

// rowHas reports whether a table row of page holds both id and word.
func rowHas(page, id, word string) bool {
	for _, row := range strings.Split(page, "<tr") {
		if strings.Contains(row, id) && strings.Contains(row, word) {
			return true
		}
	}
	return false
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func csrfOf(t *testing.T, body string) string {
	t.Helper()
	m := csrfField.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no CSRF token on the page:\n%s", body)
	}
	return m[1]
}

// waitFor polls cond every half second until it holds or ctx ends.
func waitFor(ctx context.Context, t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	last := ""
	for {
		ok, detail := cond()
		if ok {
			return
		}
		last = detail
		select {
		case <-ctx.Done():
			t.Fatalf("gave up waiting for %s; last page:\n%s", what, last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// startDev builds cmd/toolfleet and runs `toolfleet dev` on free ports with
// args and a script folder in dir; it returns the gateway's URL.
func startDev(ctx context.Context, t *testing.T, dir string, args ...string) string {
	t.Helper()
	repo, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	base, _ := devproc.Start(ctx, t, devproc.Options{Repo: repo, Dir: dir, Scripts: map[string]string{"add.yaml": script},
		Args: append([]string{"--js-storage", "memory"}, args...)}) // nothing to keep, and no disk to reserve
	return base
}
