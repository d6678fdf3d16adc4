package hydratest_test

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"

	"github.com/toolfleet/toolfleet/e2e/oauth/hydratest"
)

// callback is a redirect URI no server listens at: Authorize stops before it.
const callback = "http://127.0.0.1:9/callback"

// codeFlow runs the authorization code flow with PKCE for c as subject and
// returns the tokens.
func codeFlow(t *testing.T, c hydratest.Client, subject string) *oauth2.Token {
	t.Helper()
	ctx := t.Context()
	cfg := c.Config()
	verifier := oauth2.GenerateVerifier()
	opts := []oauth2.AuthCodeOption{oauth2.S256ChallengeOption(verifier), oauth2.SetAuthURLParam("login_hint", subject),
		oauth2.SetAuthURLParam("nonce", "nonce-of-"+subject)}
	if len(c.Audience) > 0 {
		opts = append(opts, oauth2.SetAuthURLParam("audience", strings.Join(c.Audience, " ")))
	}
	u := cfg.AuthCodeURL("state-0001", opts...)
	cb, err := hydratest.Authorize(ctx, hydratest.NewBrowser(), u, c.RedirectURI)
	if err != nil {
		t.Fatal(err)
	}
	code, state, err := hydratest.CodeFrom(cb)
	if err != nil || state != "state-0001" {
		t.Fatalf("callback %s: code %q state %q err %v", cb, code, state, err)
	}
	tok, err := cfg.Exchange(ctx, code, oauth2.VerifierOption(verifier))
	if err != nil {
		t.Fatalf("exchange: %v", err)
	}
	return tok
}

// TestCodeFlowWithPKCE: a public client signs bob in through Hydra and the
// provider; the ID token verifies (discovery, JWKS, nonce), the JWT access
// token verifies offline with iss, aud and scp, and Hydra introspects it
// as bob's. A wrong verifier and a replayed code are refused; the replay
// revokes the tokens of the first exchange (RFC 6749 10.5).
func TestCodeFlowWithPKCE(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	h := hydratest.Start(t, hydratest.Options{})
	c := h.PublicClient(t, callback, []string{"openid", "offline_access", "runs:read"}, "api")

	tok := codeFlow(t, c, "bob")
	if tok.RefreshToken == "" {
		t.Fatal("no refresh token (offline_access was asked)")
	}
	provider, err := oidc.NewProvider(ctx, h.Issuer)
	if err != nil {
		t.Fatalf("discovery: %v", err)
	}
	raw, _ := tok.Extra("id_token").(string)
	idt, err := provider.Verifier(&oidc.Config{ClientID: c.ID}).Verify(ctx, raw)
	if err != nil {
		t.Fatalf("ID token: %v", err)
	}
	if idt.Subject != "bob" || idt.Nonce != "nonce-of-bob" {
		t.Fatalf("ID token sub %q nonce %q", idt.Subject, idt.Nonce)
	}
	at, err := oidc.NewVerifier(h.Issuer, oidc.NewRemoteKeySet(ctx, h.JWKSURL()), &oidc.Config{ClientID: "api"}).Verify(ctx, tok.AccessToken)
	if err != nil {
		t.Fatalf("JWT access token: %v", err)
	}
	var claims struct {
		Scp []string `json:"scp"`
	}
	if err := at.Claims(&claims); err != nil || at.Subject != "bob" || !slices.Contains(claims.Scp, "runs:read") {
		t.Fatalf("access token sub %q scp %v (%v)", at.Subject, claims.Scp, err)
	}
	in, err := h.Introspect(ctx, tok.AccessToken)
	if err != nil || !in.Active || in.Subject != "bob" || in.TokenUse != "access_token" || !slices.Contains(in.Audience, "api") {
		t.Fatalf("introspection %+v, %v", in, err)
	}

	// A wrong verifier, then the same code twice.
	cfg := c.Config()
	verifier := oauth2.GenerateVerifier()
	cb, err := hydratest.Authorize(ctx, hydratest.NewBrowser(), cfg.AuthCodeURL("state-0002", oauth2.S256ChallengeOption(verifier)), callback)
	if err != nil {
		t.Fatal(err)
	}
	code, _, err := hydratest.CodeFrom(cb)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cfg.Exchange(ctx, code, oauth2.VerifierOption(oauth2.GenerateVerifier())); err == nil {
		t.Fatal("a wrong PKCE verifier was accepted")
	}
	cb, err = hydratest.Authorize(ctx, hydratest.NewBrowser(), cfg.AuthCodeURL("state-0002", oauth2.S256ChallengeOption(verifier)), callback)
	if err != nil {
		t.Fatal(err)
	}
	code, _, _ = hydratest.CodeFrom(cb)
	first, err := cfg.Exchange(ctx, code, oauth2.VerifierOption(verifier))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cfg.Exchange(ctx, code, oauth2.VerifierOption(verifier)); err == nil {
		t.Fatal("a replayed code was accepted")
	}
	if in, err := h.Introspect(ctx, first.AccessToken); err != nil || in.Active {
		t.Fatalf("the first exchange's token after a replay: active %v (%v)", in.Active, err)
	}
}

// TestRefreshAndRevoke: a refresh gives a new access token and rotates the
// refresh token (the old one is no longer active); revoking the refresh
// token makes its access token inactive too.
func TestRefreshAndRevoke(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	h := hydratest.Start(t, hydratest.Options{})
	c := h.ConfidentialClient(t, callback, []string{"openid", "offline_access"})
	tok := codeFlow(t, c, "carol")

	stale := *tok
	stale.Expiry = time.Now().Add(-time.Minute)
	fresh, err := c.Config().TokenSource(ctx, &stale).Token()
	if err != nil {
		t.Fatalf("refresh: %v", err)
	}
	if fresh.AccessToken == tok.AccessToken || fresh.RefreshToken == "" || fresh.RefreshToken == tok.RefreshToken {
		t.Fatal("the refresh did not give new tokens")
	}
	if in, err := h.Introspect(ctx, tok.RefreshToken); err != nil || in.Active {
		t.Fatalf("the used refresh token: active %v (%v)", in.Active, err)
	}
	if in, err := h.Introspect(ctx, fresh.AccessToken); err != nil || !in.Active || in.Subject != "carol" {
		t.Fatalf("the refreshed access token: %+v (%v)", in, err)
	}
	if err := c.Revoke(ctx, fresh.RefreshToken); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	for _, tk := range []string{fresh.RefreshToken, fresh.AccessToken} {
		if in, err := h.Introspect(ctx, tk); err != nil || in.Active {
			t.Fatalf("after revocation: active %v (%v)", in.Active, err)
		}
	}
}

// TestResourceAcceptsOnlyItsTokens: the test resource API accepts an active
// token for its audience and scope, and refuses a missing, forged, foreign
// audience or short-scoped one.
func TestResourceAcceptsOnlyItsTokens(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	h := hydratest.Start(t, hydratest.Options{OpaqueAccessTokens: true})
	api := httptest.NewServer(h.Resource("inventory", []string{"items:read"}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in, _ := hydratest.TokenFrom(r)
		_, _ = w.Write([]byte("hello " + in.Subject))
	})))
	t.Cleanup(api.Close)
	token := func(scopes []string, audience ...string) string {
		m := h.MachineClient(t, scopes, audience...)
		cc := clientcredentials.Config{ClientID: m.ID, ClientSecret: m.Secret, TokenURL: h.TokenURL(), Scopes: scopes,
			EndpointParams: map[string][]string{"audience": audience}}
		tok, err := cc.Token(ctx)
		if err != nil {
			t.Fatalf("client credentials: %v", err)
		}
		return tok.AccessToken
	}
	call := func(tok string) int {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, api.URL, nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	good := token([]string{"items:read"}, "inventory")
	for _, tc := range []struct {
		name  string
		token string
		want  int
	}{
		{"its audience and scope", good, http.StatusOK},
		{"no token", "", http.StatusUnauthorized},
		{"forged", good + "x", http.StatusUnauthorized},
		{"another audience", token([]string{"items:read"}, "billing"), http.StatusUnauthorized},
		{"another scope", token([]string{"items:write"}, "inventory"), http.StatusForbidden},
	} {
		if got := call(tc.token); got != tc.want {
			t.Errorf("%s: status %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestRejectedLogin: a person who refuses at the identity provider sends
// the app an access_denied callback, never a code.
func TestRejectedLogin(t *testing.T) {
	t.Parallel()
	h := hydratest.Start(t, hydratest.Options{})
	h.Provider.RejectLogins("the person cancelled")
	c := h.PublicClient(t, callback, []string{"openid"})
	cb, err := hydratest.Authorize(t.Context(), hydratest.NewBrowser(), c.Config().AuthCodeURL("state-0002", oauth2.S256ChallengeOption(oauth2.GenerateVerifier())), callback)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := hydratest.CodeFrom(cb); err == nil || cb.Query().Get("error") != "access_denied" {
		t.Fatalf("callback %s: err %v", cb, err)
	}
}

// TestTokenHook: Hydra's token hook adds an act claim (a delegation chain)
// to access tokens: at the JWT's top level (allowed_top_level_claims) and
// in introspection's ext, for code and client_credentials grants alike.
func TestTokenHook(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	hook := hydratest.ServeTokenHook(t, func(r hydratest.TokenRequest) map[string]any {
		return map[string]any{"act": map[string]any{"sub": "run-42", "client": r.ClientID}}
	})
	h := hydratest.Start(t, hydratest.Options{TokenHookURL: hook, TopLevelClaims: []string{"act"}})
	c := h.PublicClient(t, callback, []string{"openid"}, "api")
	tok := codeFlow(t, c, "dave")
	keys := oidc.NewRemoteKeySet(ctx, h.JWKSURL())
	at, err := oidc.NewVerifier(h.Issuer, keys, &oidc.Config{ClientID: "api"}).Verify(ctx, tok.AccessToken)
	if err != nil {
		t.Fatal(err)
	}
	var claims struct {
		Act struct {
			Sub, Client string
		} `json:"act"`
	}
	if err := at.Claims(&claims); err != nil || claims.Act.Sub != "run-42" || claims.Act.Client != c.ID {
		t.Fatalf("access token act %+v (%v)", claims.Act, err)
	}
	in, err := h.Introspect(ctx, tok.AccessToken)
	act, _ := in.Ext["act"].(map[string]any)
	if err != nil || act["sub"] != "run-42" {
		t.Fatalf("introspection ext %v (%v)", in.Ext, err)
	}

	m := h.MachineClient(t, nil)
	cc := clientcredentials.Config{ClientID: m.ID, ClientSecret: m.Secret, TokenURL: h.TokenURL()}
	mt, err := cc.Token(ctx)
	if err != nil {
		t.Fatal(err)
	}
	in, err = h.Introspect(ctx, mt.AccessToken)
	act, _ = in.Ext["act"].(map[string]any)
	if err != nil || act["client"] != m.ID {
		t.Fatalf("client_credentials introspection ext %v (%v)", in.Ext, err)
	}
}
