package console

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/oauth2"
)

// OIDCConfig configures sign-in with the operator's OpenID Connect provider:
// the authorization code flow with PKCE (docs/console.md, "Sign-in with
// OpenID Connect"). The session then calls the APIs with the access token
// the provider issued, so the gateway must accept that issuer's tokens.
type OIDCConfig struct {
	// Issuer is the provider's issuer URL; its discovery document
	// (/.well-known/openid-configuration) names the endpoints and keys.
	Issuer string
	// ClientID is the console's client at the provider.
	ClientID string
	// ClientSecret is the client's secret; "" for a public client, which
	// PKCE alone protects.
	ClientSecret string
	// Scopes are requested at sign-in. Default [DefaultOIDCScopes]; openid
	// is always added.
	Scopes []string
	// Audience, when set, is sent as the authorization request's audience
	// parameter (providers such as Ory Hydra and Auth0 put it in the access
	// token's aud, which a gateway with an audience rule requires).
	Audience string
	// RedirectURL is the callback registered at the provider. Default: the
	// request's own origin + /console/oidc/callback (http only on loopback).
	RedirectURL string
	// HTTPClient talks to the provider. Default: a client with a 15 s timeout.
	HTTPClient *http.Client
}

// DefaultOIDCScopes are what sign-in asks for when the configuration names
// none: the ID token, a refresh token, and the scopes the console's pages
// use (docs/agents.md, docs/programs.md).
var DefaultOIDCScopes = []string{oidc.ScopeOpenID, oidc.ScopeOfflineAccess, "runs:start", "runs:read", "runs:approve",
	"runs:cancel", "programs:run", "programs:read", "programs:approve"}

// Bounds of the OIDC sign-in.
const (
	// flowTTL bounds the time from "Sign in" to the provider's callback.
	flowTTL = 10 * time.Minute
	// idpTimeout bounds one call to the provider.
	idpTimeout = 15 * time.Second
	// renewBefore is how long before its expiry an access token is refreshed.
	renewBefore = 30 * time.Second
	// renewClaim is how long a replica that claimed a session's renewal
	// has to finish it before another may try.
	renewClaim = idpTimeout + 5*time.Second
)

// flowCookie carries a sign-in's state, nonce and PKCE verifier from its
// start to the callback, sealed (oidcseal.go). SameSite=Lax: the callback
// is a top-level navigation from the provider's site, which a Strict cookie
// would miss.
const flowCookie = "toolfleet_console_oidc"

// oidcSignin is the console's OIDC sign-in: the provider (discovered on
// first use, so the console starts while the provider is down). The
// sessions it signs in hold their tokens (session.go).
type oidcSignin struct {
	cfg  OIDCConfig
	seal *sealer

	// discovering serializes discovery, which may wait for the provider,
	// without holding mu.
	discovering sync.Mutex

	mu       sync.Mutex
	provider *oidc.Provider
	revoke   string // the provider's revocation endpoint, if any
}

// newOIDCSignin makes the sign-in; key, when set, seals the flow cookie so
// that a sign-in started on one replica finishes on any other.
func newOIDCSignin(cfg OIDCConfig, key []byte) (*oidcSignin, error) {
	if cfg.Issuer == "" || cfg.ClientID == "" {
		return nil, errors.New("console: OIDC sign-in needs an issuer and a client id")
	}
	if u, err := url.Parse(cfg.Issuer); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("console: OIDC issuer %q is not an http(s) URL", cfg.Issuer)
	}
	if len(cfg.Scopes) == 0 {
		cfg.Scopes = DefaultOIDCScopes
	}
	if !slices.Contains(cfg.Scopes, oidc.ScopeOpenID) {
		cfg.Scopes = append([]string{oidc.ScopeOpenID}, cfg.Scopes...)
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: idpTimeout}
	}
	seal, err := newSealer()
	if key != nil {
		seal, err = newKeySealer(key, flowPurpose)
	}
	if err != nil {
		return nil, err
	}
	return &oidcSignin{cfg: cfg, seal: seal}, nil
}

// discover returns the provider, fetching its discovery document once.
func (o *oidcSignin) discover(ctx context.Context) (*oidc.Provider, error) {
	o.discovering.Lock()
	defer o.discovering.Unlock()
	o.mu.Lock()
	p := o.provider
	o.mu.Unlock()
	if p != nil {
		return p, nil
	}
	ctx, cancel := context.WithTimeout(oidc.ClientContext(ctx, o.cfg.HTTPClient), idpTimeout)
	defer cancel()
	p, err := oidc.NewProvider(ctx, o.cfg.Issuer)
	if err != nil {
		return nil, err
	}
	var extra struct {
		Revocation string `json:"revocation_endpoint"`
	}
	_ = p.Claims(&extra) // optional
	o.mu.Lock()
	o.provider, o.revoke = p, extra.Revocation
	o.mu.Unlock()
	return p, nil
}

// oauth is the OAuth 2.0 client for a request (its redirect URL).
func (o *oidcSignin) oauth(p *oidc.Provider, redirect string) *oauth2.Config {
	ep := p.Endpoint()
	if o.cfg.ClientSecret == "" {
		ep.AuthStyle = oauth2.AuthStyleInParams // a public client sends its id only
	}
	return &oauth2.Config{ClientID: o.cfg.ClientID, ClientSecret: o.cfg.ClientSecret, Endpoint: ep,
		RedirectURL: redirect, Scopes: o.cfg.Scopes}
}

// redirectURL is the callback for r: the configured one, else r's origin.
func (o *oidcSignin) redirectURL(r *http.Request) string {
	if o.cfg.RedirectURL != "" {
		return o.cfg.RedirectURL
	}
	scheme := "https"
	if plainLoopback(r) {
		scheme = "http"
	}
	return scheme + "://" + r.Host + Prefix + "oidc/callback"
}

// flow is what the flow cookie carries.
type flow struct {
	State    string    `json:"s"`
	Nonce    string    `json:"n"`
	Verifier string    `json:"v"`
	Redirect string    `json:"r"`
	Expires  time.Time `json:"e"`
}

// oidcStart sends the browser to the provider with a fresh state, nonce and
// PKCE challenge, and keeps them in the sealed flow cookie.
func (s *Server) oidcStart(w http.ResponseWriter, r *http.Request) {
	o := s.oidc
	p, err := o.discover(r.Context())
	if err != nil {
		s.fail(w, r, nil, http.StatusBadGateway, "The identity provider at "+o.cfg.Issuer+" is not answering: try again in a moment.")
		return
	}
	f := flow{State: randomID(), Nonce: randomID(), Verifier: oauth2.GenerateVerifier(), Redirect: o.redirectURL(r),
		Expires: s.cfg.Now().Add(flowTTL)}
	value, err := o.seal.seal(f)
	if err != nil {
		s.fail(w, r, nil, http.StatusInternalServerError, "The sign-in could not start: try again.")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: flowCookie, Value: value, Path: Prefix + "oidc/", HttpOnly: true,
		SameSite: http.SameSiteLaxMode, Secure: !plainLoopback(r), MaxAge: int(flowTTL / time.Second)})
	opts := []oauth2.AuthCodeOption{oauth2.S256ChallengeOption(f.Verifier), oidc.Nonce(f.Nonce)}
	if o.cfg.Audience != "" {
		opts = append(opts, oauth2.SetAuthURLParam("audience", o.cfg.Audience))
	}
	http.Redirect(w, r, o.oauth(p, f.Redirect).AuthCodeURL(f.State, opts...), http.StatusSeeOther)
}

// errSignin is the answer to a callback that does not belong to a sign-in
// this browser started (no, an expired or a forged flow cookie, another
// state): never a session.
const errSignin = "This sign-in has expired or did not start in this browser: sign in again."

// oidcCallback finishes a sign-in: the state matches the flow cookie's, the
// code is exchanged with the PKCE verifier, the ID token verifies (issuer,
// audience, expiry, signature) and carries the flow's nonce. Then a new
// session holds the access token the API calls use.
func (s *Server) oidcCallback(w http.ResponseWriter, r *http.Request) {
	o := s.oidc
	// The flow cookie is single-use: a replayed callback finds none.
	http.SetCookie(w, &http.Cookie{Name: flowCookie, Value: "", Path: Prefix + "oidc/", HttpOnly: true,
		SameSite: http.SameSiteLaxMode, Secure: !plainLoopback(r), MaxAge: -1})
	c, err := r.Cookie(flowCookie)
	if err != nil {
		s.fail(w, r, nil, http.StatusBadRequest, errSignin)
		return
	}
	var f flow
	if err := o.seal.open(c.Value, &f); err != nil || s.cfg.Now().After(f.Expires) {
		s.fail(w, r, nil, http.StatusBadRequest, errSignin)
		return
	}
	q := r.URL.Query()
	if subtle.ConstantTimeCompare([]byte(q.Get("state")), []byte(f.State)) != 1 {
		s.fail(w, r, nil, http.StatusBadRequest, errSignin)
		return
	}
	if e := q.Get("error"); e != "" {
		s.fail(w, r, nil, http.StatusUnauthorized, "The identity provider did not sign you in ("+clip(e+": "+q.Get("error_description"), 300)+").")
		return
	}
	p, err := o.discover(r.Context())
	if err != nil {
		s.fail(w, r, nil, http.StatusBadGateway, "The identity provider at "+o.cfg.Issuer+" is not answering: sign in again in a moment.")
		return
	}
	ctx, cancel := context.WithTimeout(oidc.ClientContext(r.Context(), o.cfg.HTTPClient), idpTimeout)
	defer cancel()
	tok, err := o.oauth(p, f.Redirect).Exchange(ctx, q.Get("code"), oauth2.VerifierOption(f.Verifier))
	if err != nil {
		s.fail(w, r, nil, http.StatusBadRequest, "The identity provider did not accept this sign-in's code ("+oauthCode(err)+"): sign in again.")
		return
	}
	raw, _ := tok.Extra("id_token").(string)
	idt, err := p.Verifier(&oidc.Config{ClientID: o.cfg.ClientID, Now: s.cfg.Now}).Verify(ctx, raw)
	if err != nil {
		s.fail(w, r, nil, http.StatusBadRequest, "The identity provider's ID token did not verify: sign in again.")
		return
	}
	if subtle.ConstantTimeCompare([]byte(idt.Nonce), []byte(f.Nonce)) != 1 {
		s.fail(w, r, nil, http.StatusBadRequest, errSignin)
		return
	}
	if tok.AccessToken == "" || idt.Subject == "" {
		s.fail(w, r, nil, http.StatusBadRequest, "The identity provider gave no access token or subject: sign in again.")
		return
	}
	scopes := tokenScopes(tok)
	s.sessions.end(w, r)
	if _, err := s.sessions.start(w, r, func(n *session) {
		n.subject, n.scopes, n.token = idt.Subject, scopes, tok.AccessToken
		n.oidc, n.refresh, n.tokenExpiry = true, tok.RefreshToken, tok.Expiry
		// Without a refresh token the session ends with its access token.
		if tok.RefreshToken == "" && !tok.Expiry.IsZero() && tok.Expiry.Before(n.expires) {
			n.expires = tok.Expiry
		}
	}); err != nil {
		s.failStore(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	// A page, not a redirect: the navigation to the console then starts on
	// the console's own site, so its SameSite=Strict session cookie is sent.
	_ = signedInPage.Execute(w, map[string]string{"Next": Prefix + "runs", "Subject": idt.Subject, "CSS": Prefix + "assets/console.css"})
}

var signedInPage = template.Must(template.New("signedin").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="refresh" content="0;url={{.Next}}"><title>Signed in · toolfleet console</title>
<link rel="stylesheet" href="{{.CSS}}"></head>
<body><main><section class="panel narrow"><h1>Signed in</h1>
<p>Signed in as <code>{{.Subject}}</code>. <a href="{{.Next}}" id="continue">Continue to the console</a>.</p>
</section></main></body></html>
`))

// tokenScopes are the access token's scopes as the gateway reads them (a
// JWT's scope, scp or scopes claim), else the token response's scope. For
// display only: the gateway verifies the token on every call.
func tokenScopes(tok *oauth2.Token) []string {
	var c struct {
		jwt.RegisteredClaims
		Scope  string   `json:"scope"`
		Scp    []string `json:"scp"`
		Scopes []string `json:"scopes"`
	}
	if _, _, err := jwt.NewParser().ParseUnverified(tok.AccessToken, &c); err == nil {
		return append(append(strings.Fields(c.Scope), c.Scp...), c.Scopes...)
	}
	sc, _ := tok.Extra("scope").(string)
	return strings.Fields(sc)
}

// oauthCode is the OAuth error code of a token endpoint failure, for the
// person (never the provider's whole answer).
func oauthCode(err error) string {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) && re.ErrorCode != "" {
		return clip(re.ErrorCode, 64)
	}
	return "no answer"
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// oidcIssuer is the provider's host for the sign-in page ("" without OIDC).
func (s *Server) oidcIssuer() string {
	if s.oidc == nil {
		return ""
	}
	if u, err := url.Parse(s.oidc.cfg.Issuer); err == nil {
		return u.Host
	}
	return s.oidc.cfg.Issuer
}
