package connections

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/oauth2"
)

// The connect flow, on the gateway's port:
//
//  1. an authenticated principal asks to connect (Start; the CLI, or a tool
//     call answered with ConnectError) and gets a start URL on the gateway,
//     valid once and for StateTTL;
//  2. the principal's browser opens it: a page names the toolfleet account the
//     connection is for, and its button (a same-origin POST) makes the gateway
//     set a cookie binding this browser to the flow and redirect to the
//     provider (code + PKCE S256);
//  3. the provider redirects back to the callback with code and state: the
//     gateway checks the state (unused, unexpired) and the cookie (the same
//     browser), exchanges the code with the PKCE verifier and stores the
//     connection for the principal who started it.
//
// The cookie defeats the classic OAuth CSRF: an attacker cannot make a
// victim's browser finish a flow the attacker began (the victim has no
// cookie for it). The state is a random value in a KV key, not a
// self-contained token, so it is single use across replicas.

// pending is a started connect, sealed under its state key.
type pending struct {
	Subject  string    `json:"subject"`
	Provider string    `json:"provider"`
	Scopes   []string  `json:"scopes"`
	Verifier string    `json:"verifier"`
	Expires  time.Time `json:"expires"`
	// Binder is the SHA-256 of the cookie set at the start step (empty
	// before it: the start URL has not been opened yet).
	Binder string `json:"binder,omitempty"`
}

const cookieName = "toolfleet_connect"

// stateKey is the bucket key of a state parameter "<subject hash>.<random>".
func stateKey(state string) (string, bool) {
	h, r, ok := strings.Cut(state, ".")
	if !ok || len(h) != 32 || len(r) < 16 || len(r) > 64 || strings.ContainsAny(state, "*> \t") || strings.Contains(r, ".") {
		return "", false
	}
	return statePrefix + state, true
}

// Start begins a connection of subject to provider asking for scopes (and
// the provider's configured ones), and returns the URL the principal opens in
// a browser to go on.
func (s *Service) Start(ctx context.Context, subject, provider string, scopes []string) (string, error) {
	p, ok := s.providers[provider]
	if !ok {
		return "", fmt.Errorf("%w: %q", ErrUnknownProvider, provider)
	}
	hk := subjectKey(subject)
	open, err := s.st.keys(ctx, statePrefix+hk+".*")
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if len(open) >= maxPendingPerPrincipal {
		return "", fmt.Errorf("%w: %d unfinished connects; finish one or wait %s", ErrTooMany, len(open), s.cfg.StateTTL)
	}
	want := slices.Concat(p.Scopes, scopes)
	slices.Sort(want)
	state := hk + "." + randomString()
	key, _ := stateKey(state)
	pd := pending{Subject: subject, Provider: provider, Scopes: slices.Compact(want), Verifier: oauth2.GenerateVerifier(),
		Expires: s.cfg.Now().Add(s.cfg.StateTTL)}
	if _, err := s.st.put(ctx, key, pd, 0, jetstream.KeyTTL(s.cfg.StateTTL)); err != nil {
		return "", fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return s.cfg.PublicURL + StartPath + "?state=" + state, nil
}

// connectError builds the answer to a call whose principal must connect
// first; a failure to start one is returned instead.
func (s *Service) connectError(ctx context.Context, subject, provider string, scopes []string, reason string) error {
	u, err := s.Start(ctx, subject, provider, scopes)
	if err != nil {
		return err
	}
	return &ConnectError{Provider: provider, Scopes: slices.Clone(scopes), URL: u, Reason: reason}
}

// Handler serves [StartPath] and [CallbackPath]. Neither takes a bearer
// token: the state names the principal, the cookie the browser.
func (s *Service) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+StartPath, s.confirm)
	mux.HandleFunc("POST "+StartPath, s.start)
	mux.HandleFunc("GET "+CallbackPath, s.callback)
	return mux
}

// confirm shows whose toolfleet account the browser is about to connect a
// provider account to, with a button that goes on (POST): a link someone
// else made cannot connect the victim's provider account to the sender's
// principal without the page naming that principal first, and a cross-site
// page cannot press the button (the gateway refuses cross-origin POSTs).
func (s *Service) confirm(w http.ResponseWriter, r *http.Request) {
	state := r.URL.Query().Get("state")
	key, ok := stateKey(state)
	if !ok {
		s.page(w, http.StatusBadRequest, "This connect link is not valid.", "Ask for a new one (toolfleet connections connect PROVIDER).")
		return
	}
	var pd pending
	if _, err := s.st.get(r.Context(), key, &pd); err != nil || s.cfg.Now().After(pd.Expires) || pd.Binder != "" {
		s.page(w, http.StatusBadRequest, "This connect link was used already or has expired.", "Ask for a new one (toolfleet connections connect PROVIDER).")
		return
	}
	s.headers(w)
	w.WriteHeader(http.StatusOK)
	_ = confirmTmpl.Execute(w, struct {
		Provider, Subject, Scopes, State, Action string
	}{pd.Provider, pd.Subject, strings.Join(pd.Scopes, " "), state, StartPath})
}

func (s *Service) start(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
	key, ok := stateKey(r.PostFormValue("state"))
	if !ok {
		s.page(w, http.StatusBadRequest, "This connect link is not valid.", "Ask for a new one (toolfleet connections connect PROVIDER).")
		return
	}
	var pd pending
	rev, err := s.st.get(r.Context(), key, &pd)
	if err != nil || s.cfg.Now().After(pd.Expires) || pd.Binder != "" {
		s.page(w, http.StatusBadRequest, "This connect link was used already or has expired.", "Ask for a new one (toolfleet connections connect PROVIDER).")
		return
	}
	p := s.providers[pd.Provider]
	if p == nil {
		s.page(w, http.StatusBadRequest, "This provider is no longer configured.", "")
		return
	}
	cookie := randomString()
	sum := sha256.Sum256([]byte(cookie))
	pd.Binder = hex.EncodeToString(sum[:])
	if _, err := s.st.put(r.Context(), key, pd, rev); err != nil {
		// Another browser opened it first (compare-and-swap lost), or the store is away.
		s.page(w, http.StatusConflict, "This connect link was used already.", "Ask for a new one.")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: cookie, Path: "/connections/", MaxAge: int(s.cfg.StateTTL / time.Second),
		HttpOnly: true, Secure: strings.HasPrefix(s.cfg.PublicURL, "https://"), SameSite: http.SameSiteLaxMode})
	opts := []oauth2.AuthCodeOption{oauth2.S256ChallengeOption(pd.Verifier)}
	for k, v := range p.Params {
		opts = append(opts, oauth2.SetAuthURLParam(k, v))
	}
	state := strings.TrimPrefix(key, statePrefix)
	http.Redirect(w, r, p.oauth(s.cfg.PublicURL+CallbackPath, pd.Scopes).AuthCodeURL(state, opts...), http.StatusFound)
}

func (s *Service) callback(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	key, ok := stateKey(q.Get("state"))
	if !ok {
		s.page(w, http.StatusBadRequest, "This answer from the provider is not valid.", "")
		return
	}
	var pd pending
	rev, err := s.st.get(r.Context(), key, &pd)
	if err != nil || pd.Binder == "" || s.cfg.Now().After(pd.Expires) {
		s.page(w, http.StatusBadRequest, "This connect was finished already or has expired.", "Start again.")
		return
	}
	c, err := r.Cookie(cookieName)
	sum := sha256.Sum256([]byte(cookieValue(c, err)))
	if subtle.ConstantTimeCompare([]byte(hex.EncodeToString(sum[:])), []byte(pd.Binder)) != 1 {
		s.log.Warn("connect callback from another browser refused", "provider", pd.Provider)
		s.page(w, http.StatusForbidden, "This connect was started in another browser.", "Open the connect link in this browser, or start again.")
		return
	}
	// Single use: whoever deletes this revision finishes the flow.
	if err := s.st.delete(r.Context(), key, jetstream.LastRevision(rev)); err != nil {
		s.page(w, http.StatusConflict, "This connect was finished already.", "")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Path: "/connections/", MaxAge: -1})
	if e := q.Get("error"); e != "" {
		// The provider's error code is a fixed vocabulary (RFC 6749 §4.1.2.1); its description is not shown.
		s.page(w, http.StatusBadRequest, "The provider did not grant the connection ("+e+").", "")
		return
	}
	p := s.providers[pd.Provider]
	if p == nil || q.Get("code") == "" {
		s.page(w, http.StatusBadRequest, "The provider's answer has no code.", "")
		return
	}
	// x/oauth2 reads at most 1 MiB of a token response.
	ctx := context.WithValue(r.Context(), oauth2.HTTPClient, s.cfg.HTTPClient)
	tok, err := p.oauth(s.cfg.PublicURL+CallbackPath, pd.Scopes).Exchange(ctx, q.Get("code"), oauth2.VerifierOption(pd.Verifier))
	if err != nil {
		s.log.Warn("connect: code exchange failed", "provider", pd.Provider, "error", describeOAuthError(err))
		s.page(w, http.StatusBadGateway, "The provider did not accept the authorization.", "Start again.")
		return
	}
	conn, err := s.save(r.Context(), pd, tok)
	if err != nil {
		s.log.Warn("connect: store failed", "provider", pd.Provider, "error", err)
		next := "Try again later."
		if errors.Is(err, ErrTooMany) {
			next = fmt.Sprintf("You hold the most connections allowed (%d): revoke one first (toolfleet connections revoke PROVIDER).", s.cfg.MaxPerPrincipal)
		}
		s.page(w, http.StatusServiceUnavailable, "The connection could not be saved.", next)
		return
	}
	s.log.Info("connection made", "provider", conn.Provider, "connection", conn.ID, "scopes", conn.Scopes)
	next := "You can close this window."
	if resumed := s.resume(r.Context(), pd.Subject, pd.Provider); resumed != "" {
		next = resumed + " " + next
	}
	s.page(w, http.StatusOK, "Connected your "+pd.Provider+" account.", next)
}

func cookieValue(c *http.Cookie, err error) string {
	if err != nil {
		return ""
	}
	return c.Value
}

// save stores the connection a code exchange made, replacing the principal's
// earlier connection to the same provider.
func (s *Service) save(ctx context.Context, pd pending, tok *oauth2.Token) (Connection, error) {
	if err := s.checkSizes(tok); err != nil {
		return Connection{}, err
	}
	key := connKey(pd.Subject, pd.Provider)
	keys, err := s.st.keys(ctx, connPrefix+subjectKey(pd.Subject)+".*")
	if err != nil {
		return Connection{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if len(keys) >= s.cfg.MaxPerPrincipal && !slices.Contains(keys, key) {
		return Connection{}, fmt.Errorf("%w: at most %d connections: revoke one first", ErrTooMany, s.cfg.MaxPerPrincipal)
	}
	now := s.cfg.Now()
	r := record{ID: randomString(), Subject: pd.Subject, Provider: pd.Provider, Scopes: grantedScopes(tok, pd.Scopes), Created: now,
		Access: token{Value: tok.AccessToken, Type: tok.Type(), Expiry: tok.Expiry}, Refresh: tok.RefreshToken}
	if err := s.st.overwrite(ctx, key, r); err != nil {
		return Connection{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return r.public(), nil
}

// Import stores a connection of subject to provider made outside the
// gateway's flow, e.g. a grant moved from another system, replacing the
// principal's earlier connection to the provider; scopes are what tok grants
// when its response names none. The same bounds apply as to a connection
// made through the flow.
func (s *Service) Import(ctx context.Context, subject, provider string, scopes []string, tok *oauth2.Token) (Connection, error) {
	if _, ok := s.providers[provider]; !ok {
		return Connection{}, fmt.Errorf("%w: %q", ErrUnknownProvider, provider)
	}
	sorted := slices.Clone(scopes)
	slices.Sort(sorted)
	return s.save(ctx, pending{Subject: subject, Provider: provider, Scopes: slices.Compact(sorted)}, tok)
}

// grantedScopes are the scopes a token response grants: its "scope" field,
// or the requested ones when it has none (RFC 6749 §5.1).
func grantedScopes(tok *oauth2.Token, requested []string) []string {
	s, _ := tok.Extra("scope").(string)
	if s == "" {
		return slices.Clone(requested)
	}
	out := strings.Fields(s)
	slices.Sort(out)
	return slices.Compact(out)
}

// checkSizes refuses tokens over the bound (a provider's answer is not trusted to be small).
func (s *Service) checkSizes(tok *oauth2.Token) error {
	if tok.AccessToken == "" {
		return fmt.Errorf("%w: the provider returned no access token", ErrUnavailable)
	}
	if len(tok.AccessToken) > s.cfg.MaxTokenBytes || len(tok.RefreshToken) > s.cfg.MaxTokenBytes {
		return fmt.Errorf("%w: the provider returned a token over %d bytes", ErrUnavailable, s.cfg.MaxTokenBytes)
	}
	return nil
}

// describeOAuthError keeps an OAuth error's code and status, never the
// response body (it may echo a token).
func describeOAuthError(err error) string {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		status := 0
		if re.Response != nil {
			status = re.Response.StatusCode
		}
		if re.ErrorCode != "" {
			return fmt.Sprintf("status %d, error %s", status, re.ErrorCode)
		}
		return fmt.Sprintf("status %d", status)
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return redactURLError(ue).Error()
	}
	return "token request failed"
}

var pageTmpl = template.Must(template.New("page").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>toolfleet connections</title></head>
<body><h1>{{.Title}}</h1>{{with .Next}}<p>{{.}}</p>{{end}}</body></html>
`))

var confirmTmpl = template.Must(template.New("confirm").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>toolfleet connections</title></head>
<body><h1>Connect your {{.Provider}} account?</h1>
<p>Tools will act with your {{.Provider}} account for the toolfleet account <strong>{{.Subject}}</strong>{{with .Scopes}} (scopes: {{.}}){{end}}.
If that is not you, close this page.</p>
<form method="post" action="{{.Action}}"><input type="hidden" name="state" value="{{.State}}">
<button type="submit">Continue to {{.Provider}}</button></form></body></html>
`))

// headers are every page's: no script, no framing, no caching, no referrer
// (the URL holds the state).
func (s *Service) headers(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", "default-src 'none'; frame-ancestors 'none'")
	h.Set("Cache-Control", "no-store")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
}

// page answers the browser with a short page.
func (s *Service) page(w http.ResponseWriter, status int, title, next string) {
	s.headers(w)
	w.WriteHeader(status)
	_ = pageTmpl.Execute(w, struct{ Title, Next string }{title, next})
}
