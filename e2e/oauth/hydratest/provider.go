package hydratest

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// DefaultSubject is who a [Provider] signs in when nothing else says.
const DefaultSubject = "alice"

// Provider is Hydra's login and consent app for tests: Hydra redirects the
// browser (here a Go http.Client with a cookie jar) to it with a challenge;
// it accepts the login for a subject the test chooses and grants the
// requested scopes and audiences, then redirects back to Hydra. Hydra's
// login and consent flows (CSRF cookies, challenges, PKCE) run for real.
//
// The subject is the authorization request's login_hint when it has one
// (oauth2.SetAuthURLParam("login_hint", "bob")), else the one set with
// [Provider.SetSubject], else [DefaultSubject].
type Provider struct {
	mu       sync.Mutex
	subject  string
	reject   string
	withhold []string
	claims   func(subject string) map[string]any
	srv      atomic.Pointer[Server]
	logins   atomic.Int64
	consents atomic.Int64
}

// NewProvider returns a provider that signs everyone in as [DefaultSubject].
func NewProvider() *Provider { return &Provider{subject: DefaultSubject} }

// SetSubject sets who the following logins without a login_hint are.
func (p *Provider) SetSubject(sub string) {
	p.mu.Lock()
	p.subject = sub
	p.mu.Unlock()
}

// RejectLogins makes the following logins fail with access_denied and
// description ("" accepts them again): a person who cancels at the IdP.
func (p *Provider) RejectLogins(description string) {
	p.mu.Lock()
	p.reject = description
	p.mu.Unlock()
}

// Withhold makes the following consents grant the requested scopes except
// these (e.g. offline_access: no refresh token); none grants all again.
func (p *Provider) Withhold(scopes ...string) {
	p.mu.Lock()
	p.withhold = scopes
	p.mu.Unlock()
}

// SetIDTokenClaims sets extra ID token claims per subject (e.g. email).
func (p *Provider) SetIDTokenClaims(f func(subject string) map[string]any) {
	p.mu.Lock()
	p.claims = f
	p.mu.Unlock()
}

// Logins and Consents count the accepted logins and consents.
func (p *Provider) Logins() int64   { return p.logins.Load() }
func (p *Provider) Consents() int64 { return p.consents.Load() }

func (p *Provider) attach(s *Server) { p.srv.Store(s) }

// serveProvider serves p on a loopback port until t ends; it returns its base URL.
func serveProvider(t testing.TB, p *Provider) string {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /login", p.login)
	mux.HandleFunc("GET /consent", p.consent)
	mux.HandleFunc("GET /logout", p.logout)
	mux.HandleFunc("GET /error", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "hydra error: "+r.URL.Query().Get("error")+": "+r.URL.Query().Get("error_description"), http.StatusBadRequest)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

// loginRequest is the part of Hydra's login request the provider reads.
type loginRequest struct {
	Skip        bool   `json:"skip"`
	Subject     string `json:"subject"`
	OIDCContext struct {
		LoginHint string `json:"login_hint"`
	} `json:"oidc_context"`
}

// hintPattern is what a login_hint may be to become a subject.
var hintPattern = regexp.MustCompile(`^[A-Za-z0-9._@:-]{1,128}$`)

func (p *Provider) login(w http.ResponseWriter, r *http.Request) {
	s := p.srv.Load()
	challenge := r.URL.Query().Get("login_challenge")
	if s == nil || challenge == "" {
		http.Error(w, "no login challenge", http.StatusBadRequest)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	q := "?login_challenge=" + url.QueryEscape(challenge)
	var lr loginRequest
	if err := s.adminJSON(ctx, http.MethodGet, "/admin/oauth2/auth/requests/login"+q, nil, &lr); err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	p.mu.Lock()
	subject, reject := p.subject, p.reject
	p.mu.Unlock()
	if h := lr.OIDCContext.LoginHint; hintPattern.MatchString(h) {
		subject = h
	}
	if lr.Skip {
		subject = lr.Subject
	}
	var next struct {
		RedirectTo string `json:"redirect_to"`
	}
	var err error
	if reject != "" && !lr.Skip {
		err = s.adminJSON(ctx, http.MethodPut, "/admin/oauth2/auth/requests/login/reject"+q,
			map[string]any{"error": "access_denied", "error_description": reject}, &next)
	} else {
		err = s.adminJSON(ctx, http.MethodPut, "/admin/oauth2/auth/requests/login/accept"+q,
			map[string]any{"subject": subject, "remember": false}, &next)
		if err == nil {
			p.logins.Add(1)
		}
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	http.Redirect(w, r, next.RedirectTo, http.StatusFound)
}

// consentRequest is the part of Hydra's consent request the provider reads.
type consentRequest struct {
	Subject           string   `json:"subject"`
	RequestedScope    []string `json:"requested_scope"`
	RequestedAudience []string `json:"requested_access_token_audience"`
}

func (p *Provider) consent(w http.ResponseWriter, r *http.Request) {
	s := p.srv.Load()
	challenge := r.URL.Query().Get("consent_challenge")
	if s == nil || challenge == "" {
		http.Error(w, "no consent challenge", http.StatusBadRequest)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	q := "?consent_challenge=" + url.QueryEscape(challenge)
	var cr consentRequest
	if err := s.adminJSON(ctx, http.MethodGet, "/admin/oauth2/auth/requests/consent"+q, nil, &cr); err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	p.mu.Lock()
	claimsOf, withhold := p.claims, p.withhold
	p.mu.Unlock()
	grant := []string{}
	for _, sc := range cr.RequestedScope {
		if !slices.Contains(withhold, sc) {
			grant = append(grant, sc)
		}
	}
	idToken := map[string]any{}
	if claimsOf != nil {
		idToken = claimsOf(cr.Subject)
	}
	var next struct {
		RedirectTo string `json:"redirect_to"`
	}
	if err := s.adminJSON(ctx, http.MethodPut, "/admin/oauth2/auth/requests/consent/accept"+q, map[string]any{
		"grant_scope":                 grant,
		"grant_access_token_audience": nonNil(cr.RequestedAudience),
		"remember":                    false,
		"session":                     map[string]any{"id_token": idToken},
	}, &next); err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	p.consents.Add(1)
	http.Redirect(w, r, next.RedirectTo, http.StatusFound)
}

func (p *Provider) logout(w http.ResponseWriter, r *http.Request) {
	s := p.srv.Load()
	challenge := r.URL.Query().Get("logout_challenge")
	if s == nil || challenge == "" {
		http.Error(w, "no logout challenge", http.StatusBadRequest)
		return
	}
	var next struct {
		RedirectTo string `json:"redirect_to"`
	}
	if err := s.adminJSON(r.Context(), http.MethodPut, "/admin/oauth2/auth/requests/logout/accept?logout_challenge="+url.QueryEscape(challenge), nil, &next); err != nil {
		http.Error(w, fmt.Sprint(err), http.StatusBadGateway)
		return
	}
	http.Redirect(w, r, next.RedirectTo, http.StatusFound)
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
