package tokenexchange_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"
	"golang.org/x/oauth2"

	"github.com/toolfleet/toolfleet/services/gateway/connections"
	"github.com/toolfleet/toolfleet/services/gateway/exchange"
)

const (
	clientID     = "toolfleet-gateway"
	clientSecret = "toolfleet-gateway-secret"
	redirectURI  = "http://127.0.0.1:1/callback" // never reached: the browser stops there
)

// startOP serves zitadel's example OP on loopback until t ends; its
// issuer ends with a slash.
func startOP(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	issuer := "http://" + ln.Addr().String() + "/"
	// The gateway's client, and two resource servers that introspect tokens:
	// the OP answers active only to a client in the token's audience.
	storage.RegisterClients(storage.WebClient(clientID, clientSecret, redirectURI),
		storage.WebClient("inventory", "inventory-secret"), storage.WebClient("billing", "billing-secret"))
	st := storage.NewStorage(storage.NewUserStore(issuer))
	router := exampleop.SetupServer(issuer, st, slog.New(slog.NewTextHandler(io.Discard, nil)), false)
	srv := &http.Server{Handler: router, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return issuer
}

// signIn runs the authorization code flow for user through the OP's login
// form and returns the user's access token.
func signIn(t *testing.T, issuer, user string) string {
	t.Helper()
	ctx := t.Context()
	base := strings.TrimSuffix(issuer, "/")
	cfg := &oauth2.Config{ClientID: clientID, ClientSecret: clientSecret, RedirectURL: redirectURI, Scopes: []string{"openid", "profile"},
		Endpoint: oauth2.Endpoint{AuthURL: base + "/auth", TokenURL: base + "/oauth/token", AuthStyle: oauth2.AuthStyleInHeader}}
	browser := &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(r *http.Request, _ []*http.Request) error {
		if strings.HasPrefix(r.URL.String(), redirectURI) {
			return http.ErrUseLastResponse
		}
		return nil
	}}
	noFollow := &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noFollow.Get(cfg.AuthCodeURL("state-123456"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	login, err := url.Parse(resp.Header.Get("Location"))
	if err != nil || resp.StatusCode != http.StatusFound {
		t.Fatalf("authorize: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	id := login.Query().Get("authRequestID")
	form := url.Values{"username": {user}, "password": {"verysecure"}, "id": {id}}
	resp, err = browser.PostForm(base+"/login/username", form)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	cb, err := url.Parse(resp.Header.Get("Location"))
	if err != nil || cb.Query().Get("code") == "" {
		t.Fatalf("login: %d, callback %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	tok, err := cfg.Exchange(ctx, cb.Query().Get("code"))
	if err != nil {
		t.Fatal(err)
	}
	return tok.AccessToken
}

// userinfo is the OP's userinfo answer for token (its sub), or an error.
func userinfo(ctx context.Context, issuer, token string) (string, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(issuer, "/")+"/userinfo", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("userinfo: status %d", resp.StatusCode)
	}
	var u struct {
		Sub string `json:"sub"`
	}
	err = json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&u)
	return u.Sub, err
}

// TestTokenExchangeAtARealServer: the gateway's token-exchange client,
// configured from discovery, exchanges a person's own token at a real RFC
// 8693 server for a new token of that person bound to the tool's audience
// and scopes (introspection answers active to that audience's API only); a
// forged subject token is refused (PERMISSION_DENIED at the gateway). The
// example OP adds no act claim for this (direct) exchange, and its storage
// accepts only subject tokens it issued itself; the delegated form (a
// subject JWT the gateway signs) runs in TestDelegatedExchangeAtARealServer,
// on a storage that trusts the gateway's key.
func TestTokenExchangeAtARealServer(t *testing.T) {
	ctx := t.Context()
	issuer := startOP(t)
	host := strings.Split(strings.TrimPrefix(strings.TrimSuffix(issuer, "/"), "http://"), ":")[0]
	alice := signIn(t, issuer, "test-user@"+host) // the example's user "id1"

	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte(clientSecret), 0o600); err != nil {
		t.Fatal(err)
	}
	set, err := exchange.New(ctx, []connections.Provider{{Name: "corp", Issuer: issuer, ClientID: clientID, ClientSecretFile: secret,
		Exchange: connections.ExchangeTokenExchange}}, exchange.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := set.Token(ctx, "corp", exchange.Request{Subject: "id1", SubjectToken: alice, Audience: "inventory", Scopes: []string{"openid"}})
	if err != nil {
		t.Fatalf("exchange: %v", err)
	}
	if tok.Value == "" || tok.Value == alice || tok.Expiry.IsZero() {
		t.Fatalf("exchanged token: new %v, expiry %v", tok.Value != alice, tok.Expiry)
	}
	if sub, err := userinfo(ctx, issuer, tok.Value); err != nil || sub != "id1" {
		t.Fatalf("the exchanged token at the server: sub %q (%v), want id1", sub, err)
	}
	// Bound to its audience: the inventory API sees an active token of
	// alice with exactly the scope asked for; the billing API does not.
	if in := introspect(t, issuer, "inventory", tok.Value); in["active"] != true || in["sub"] != "id1" || in["scope"] != "openid" {
		t.Fatalf("introspected by the inventory API: %v", in)
	}
	if in := introspect(t, issuer, "billing", tok.Value); in["active"] != false {
		t.Fatalf("introspected by the billing API: %v", in)
	}
	_, err = set.Token(ctx, "corp", exchange.Request{Subject: "mallory", SubjectToken: alice + "x", Audience: clientID, Scopes: []string{"openid"}})
	if !errors.Is(err, exchange.ErrRefused) {
		t.Fatalf("a forged subject token: %v, want a refusal", err)
	}
}

// introspect asks the OP about token as the resource server api (RFC 7662).
func introspect(t *testing.T, issuer, api, token string) map[string]any {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, strings.TrimSuffix(issuer, "/")+"/oauth/introspect",
		strings.NewReader(url.Values{"token": {token}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(api, api+"-secret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	_ = json.Unmarshal(b, &out)
	if out == nil {
		out = map[string]any{"status": resp.StatusCode, "body": string(b)}
	}
	return out
}
