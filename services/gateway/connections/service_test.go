package connections_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/internal/natsx/natstest"
	"github.com/toolfleet/toolfleet/services/gateway/connections"
)

// provider is a configured provider; its endpoints are never reached by
// these tests (the flow against a real server is e2e/oauth's).
func provider(t *testing.T, name string) connections.Provider {
	t.Helper()
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("client-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return connections.Provider{Name: name, ClientID: "toolfleet", ClientSecretFile: secret,
		AuthorizationURL: "https://" + name + ".example/authorize", TokenURL: "https://" + name + ".example/token",
		Scopes: []string{"offline_access"}}
}

func jetStream(t *testing.T) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(natstest.Start(t).URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

func service(t *testing.T, js jetstream.JetStream, r *connections.KeyRing, log *slog.Logger) *connections.Service {
	t.Helper()
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s, err := connections.New(t.Context(), js, connections.Config{
		Providers: []connections.Provider{provider(t, "github"), provider(t, "corp")},
		KeyRing:   r, PublicURL: "http://127.0.0.1:8080",
		Bucket: jetstream.KeyValueConfig{Bucket: "toolfleet_connections", Storage: jetstream.MemoryStorage, MaxBytes: 8 << 20},
		Logger: log, MaxPerPrincipal: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var github = &toolfleetv1.ToolCredential{Provider: "github", Scopes: []string{"repo"}}

func TestTokenOfConnection(t *testing.T) {
	t.Parallel()
	s := service(t, jetStream(t), ring(t, connections.NewKeyLine("k1")), nil)
	ctx := t.Context()
	if err := s.Seed(ctx, "alice", "github", []string{"offline_access", "repo"}, "alice-access", "alice-refresh", time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	tok, err := s.Token(ctx, "alice", github)
	if err != nil || tok.Value != "alice-access" || tok.ConnectionID == "" {
		t.Fatalf("alice's token: %v, %v", tok, err)
	}
	if strings.Contains(tok.String(), "alice-access") {
		t.Fatal("Token.String shows the token")
	}
	// Bob has no connection: a request to connect, never Alice's token.
	_, err = s.Token(ctx, "bob", github)
	var ce *connections.ConnectError
	if !errors.As(err, &ce) || !errors.Is(err, connections.ErrNotConnected) {
		t.Fatalf("bob: %v, want a ConnectError", err)
	}
	if !strings.HasPrefix(ce.URL, "http://127.0.0.1:8080/connections/start?state=") || ce.Provider != "github" {
		t.Fatalf("connect request %+v", ce)
	}
	// More scopes than connected: a request to connect again with both.
	_, err = s.Token(ctx, "alice", &toolfleetv1.ToolCredential{Provider: "github", Scopes: []string{"repo", "admin:org"}})
	if !errors.As(err, &ce) || !strings.Contains(ce.Reason, "admin:org") {
		t.Fatalf("wider scopes: %v", err)
	}
	// A record moved under Bob's key does not open there (sealed to its key).
	if err := s.Copy(ctx, "alice", "bob", "github"); err != nil {
		t.Fatal(err)
	}
	if tok, err := s.Token(ctx, "bob", github); !errors.As(err, &ce) || tok.Value != "" {
		t.Fatalf("bob with alice's record copied to his key: %v, %v", tok, err)
	}
	if _, err := s.Token(ctx, "alice", &toolfleetv1.ToolCredential{Provider: "gitlab"}); !errors.Is(err, connections.ErrUnknownProvider) {
		t.Fatalf("unknown provider: %v", err)
	}
}

// Records sealed before a key rotation stay readable after it; the stored
// bytes never hold a token.
func TestKeyRotationKeepsConnections(t *testing.T) {
	t.Parallel()
	js := jetStream(t)
	k1, k2 := connections.NewKeyLine("k1"), connections.NewKeyLine("k2")
	before := service(t, js, ring(t, k1), nil)
	ctx := t.Context()
	if err := before.Seed(ctx, "alice", "github", []string{"repo"}, "alice-access", "alice-refresh", time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	raw, err := before.Raw(ctx, "alice", "github")
	if err != nil || bytes.Contains(raw, []byte("alice-access")) || bytes.Contains(raw, []byte("alice-refresh")) || bytes.Contains(raw, []byte("alice")) {
		t.Fatalf("stored record shows what it seals (or %v)", err)
	}
	after := service(t, js, ring(t, k2, k1), nil)
	if tok, err := after.Token(ctx, "alice", github); err != nil || tok.Value != "alice-access" {
		t.Fatalf("after rotation: %v, %v", tok, err)
	}
	list, err := after.List(ctx, "alice")
	if err != nil || len(list) != 1 || list[0].Provider != "github" || list[0].ID == "" || !list[0].Refreshable {
		t.Fatalf("list after rotation: %+v, %v", list, err)
	}
	// The old key dropped too early: the connection asks to reconnect, and
	// is still listed (by provider) so that it can be revoked.
	dropped := service(t, js, ring(t, k2), nil)
	var ce *connections.ConnectError
	if _, err := dropped.Token(ctx, "alice", github); !errors.As(err, &ce) {
		t.Fatalf("key dropped: %v, want a ConnectError", err)
	}
	if list, err := dropped.List(ctx, "alice"); err != nil || len(list) != 1 || list[0].Provider != "github" {
		t.Fatalf("list with the key dropped: %+v, %v", list, err)
	}
	if found, err := dropped.Revoke(ctx, "alice", "github"); !found || err != nil {
		t.Fatalf("revoke: %v, %v", found, err)
	}
	if list, err := dropped.List(ctx, "alice"); err != nil || len(list) != 0 {
		t.Fatalf("list after revoke: %+v, %v", list, err)
	}
}

func TestListAndRevokeArePerPrincipal(t *testing.T) {
	t.Parallel()
	s := service(t, jetStream(t), ring(t, connections.NewKeyLine("k")), nil)
	ctx := t.Context()
	for _, c := range []struct{ who, provider string }{{"alice", "github"}, {"alice", "corp"}, {"bob", "github"}} {
		if err := s.Seed(ctx, c.who, c.provider, []string{"repo"}, c.who+"-token", "", time.Time{}); err != nil {
			t.Fatal(err)
		}
	}
	if list, err := s.List(ctx, "alice"); err != nil || len(list) != 2 || list[0].Provider != "corp" || list[1].Provider != "github" {
		t.Fatalf("alice's list: %+v, %v", list, err)
	}
	if found, err := s.Revoke(ctx, "alice", "github"); !found || err != nil {
		t.Fatalf("revoke: %v, %v", found, err)
	}
	if tok, err := s.Token(ctx, "bob", github); err != nil || tok.Value != "bob-token" {
		t.Fatalf("bob's connection after alice revoked hers: %v, %v", tok, err)
	}
	if found, err := s.Revoke(ctx, "alice", "github"); found || err != nil {
		t.Fatalf("second revoke: %v, %v", found, err)
	}
	if _, err := s.Revoke(ctx, "alice", "nope"); !errors.Is(err, connections.ErrUnknownProvider) {
		t.Fatalf("unknown provider: %v", err)
	}
}

// An expired token without a refresh token asks to reconnect.
func TestExpiredWithoutRefresh(t *testing.T) {
	t.Parallel()
	s := service(t, jetStream(t), ring(t, connections.NewKeyLine("k")), nil)
	if err := s.Seed(t.Context(), "alice", "github", []string{"repo"}, "old", "", time.Now().Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	var ce *connections.ConnectError
	if tok, err := s.Token(t.Context(), "alice", github); !errors.As(err, &ce) || tok.Value != "" {
		t.Fatalf("expired: %v, %v", tok, err)
	}
}

// The start link redirects once, with PKCE, and binds the browser; the
// callback refuses another browser, a reused state and a forged one.
func TestConnectFlowGuards(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	s := service(t, jetStream(t), ring(t, connections.NewKeyLine("k")), slog.New(slog.NewTextHandler(&logs, nil)))
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	ctx := t.Context()
	start, err := s.Start(ctx, "alice", "github", []string{"repo"})
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(start)
	state := u.Query().Get("state")
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }, Timeout: 10 * time.Second}
	get := func(path string, cookies ...*http.Cookie) *http.Response {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
		for _, c := range cookies {
			req.AddCookie(c)
		}
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp
	}
	// The link shows whose account it connects, and goes on only by its button (POST).
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+connections.StartPath+"?state="+state, nil)
	page, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(page.Body)
	_ = page.Body.Close()
	if page.StatusCode != http.StatusOK || !strings.Contains(string(body), "<strong>alice</strong>") || !strings.Contains(string(body), `method="post"`) ||
		!strings.Contains(page.Header.Get("Content-Security-Policy"), "default-src 'none'") {
		t.Fatalf("confirm page: %d %s", page.StatusCode, body)
	}
	post := func() *http.Response {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+connections.StartPath, strings.NewReader(url.Values{"state": {state}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp
	}
	resp := post()
	if resp.StatusCode != http.StatusFound {
		t.Fatalf("start: status %d", resp.StatusCode)
	}
	loc, _ := url.Parse(resp.Header.Get("Location"))
	q := loc.Query()
	if loc.Host != "github.example" || q.Get("state") != state || q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "" ||
		q.Get("redirect_uri") != "http://127.0.0.1:8080/connections/callback" || q.Get("scope") != "offline_access repo" || q.Get("client_id") != "toolfleet" {
		t.Fatalf("redirect to the provider: %s", loc)
	}
	cookies := resp.Cookies()
	if len(cookies) != 1 || !cookies[0].HttpOnly || cookies[0].SameSite != http.SameSiteLaxMode {
		t.Fatalf("binding cookie %+v", cookies)
	}
	if r := post(); r.StatusCode == http.StatusFound {
		t.Fatal("the start link redirected twice")
	}
	if r := get(connections.StartPath + "?state=" + state); r.StatusCode != http.StatusBadRequest {
		t.Fatalf("the used link's page: status %d", r.StatusCode)
	}
	// The provider's answer in another browser (no cookie, a wrong one): refused.
	if r := get(connections.CallbackPath + "?code=x&state=" + state); r.StatusCode != http.StatusForbidden {
		t.Fatalf("callback without the cookie: status %d", r.StatusCode)
	}
	if r := get(connections.CallbackPath+"?code=x&state="+state, &http.Cookie{Name: cookies[0].Name, Value: "guess"}); r.StatusCode != http.StatusForbidden {
		t.Fatalf("callback with a wrong cookie: status %d", r.StatusCode)
	}
	// The provider refused: the state is spent, nothing is stored.
	if r := get(connections.CallbackPath+"?error=access_denied&state="+state, cookies[0]); r.StatusCode != http.StatusBadRequest {
		t.Fatalf("denied: status %d", r.StatusCode)
	}
	if r := get(connections.CallbackPath+"?code=x&state="+state, cookies[0]); r.StatusCode != http.StatusBadRequest {
		t.Fatalf("state reused: status %d", r.StatusCode)
	}
	for _, forged := range []string{"", "x", strings.Repeat("a", 32) + ".>", strings.Repeat("a", 32) + "." + strings.Repeat("B", 26)} {
		if r := get(connections.CallbackPath + "?code=x&state=" + url.QueryEscape(forged)); r.StatusCode != http.StatusBadRequest {
			t.Fatalf("forged state %q: status %d", forged, r.StatusCode)
		}
	}
	if list, err := s.List(ctx, "alice"); err != nil || len(list) != 0 {
		t.Fatalf("connections after refused flows: %+v, %v", list, err)
	}
	if strings.Contains(logs.String(), cookies[0].Value) {
		t.Fatal("the log shows the binding cookie")
	}
}

// A principal has a bounded number of unfinished connects.
func TestPendingBound(t *testing.T) {
	t.Parallel()
	s := service(t, jetStream(t), ring(t, connections.NewKeyLine("k")), nil)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var err error
	for i := 0; i < 20 && err == nil; i++ {
		_, err = s.Start(ctx, "mallory", "github", nil)
	}
	if !errors.Is(err, connections.ErrTooMany) {
		t.Fatalf("20 unfinished connects: %v, want ErrTooMany", err)
	}
	if _, err := s.Start(ctx, "alice", "github", nil); err != nil {
		t.Fatalf("another principal: %v", err)
	}
}

// A principal holds at most MaxPerPrincipal connections; replacing one it
// holds is not a new one, and another principal is not affected.
func TestConnectionsPerPrincipalBound(t *testing.T) {
	t.Parallel()
	js := jetStream(t)
	s, err := connections.New(t.Context(), js, connections.Config{
		Providers: []connections.Provider{provider(t, "a"), provider(t, "b"), provider(t, "c")},
		KeyRing:   ring(t, connections.NewKeyLine("k")), PublicURL: "http://127.0.0.1:8080",
		Bucket: jetstream.KeyValueConfig{Bucket: "toolfleet_connections", Storage: jetstream.MemoryStorage, MaxBytes: 8 << 20},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), MaxPerPrincipal: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	for _, p := range []string{"a", "b", "b"} {
		if err := s.Seed(ctx, "alice", p, nil, "t-"+p, "", time.Time{}); err != nil {
			t.Fatalf("connection %s: %v", p, err)
		}
	}
	if err := s.Seed(ctx, "alice", "c", nil, "t-c", "", time.Time{}); !errors.Is(err, connections.ErrTooMany) {
		t.Fatalf("third connection: %v, want ErrTooMany", err)
	}
	if err := s.Seed(ctx, "bob", "c", nil, "t-c", "", time.Time{}); err != nil {
		t.Fatalf("another principal: %v", err)
	}
	// Tokens over the bound are refused.
	if err := s.Seed(ctx, "bob", "a", nil, strings.Repeat("x", connections.DefaultMaxTokenBytes+1), "", time.Time{}); !errors.Is(err, connections.ErrUnavailable) {
		t.Fatalf("a huge token: %v", err)
	}
}
