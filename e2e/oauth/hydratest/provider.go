package hydratest

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/internal/hydralogin"
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
	adm      atomic.Pointer[hydralogin.Admin]
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

// attach points p at the admin API of the Hydra it serves.
func (p *Provider) attach(s *Server) {
	a, err := hydralogin.NewAdmin(s.AdminURL, s.admin)
	if err != nil {
		panic(err) // s.AdminURL is always http://127.0.0.1:PORT
	}
	p.adm.Store(a)
}

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

// hintPattern is what a login_hint may be to become a subject.
var hintPattern = regexp.MustCompile(`^[A-Za-z0-9._@:-]{1,128}$`)

// admin is the admin API client of the Hydra p serves, once attached.
func (p *Provider) admin() *hydralogin.Admin { return p.adm.Load() }

func (p *Provider) login(w http.ResponseWriter, r *http.Request) {
	a := p.admin()
	challenge := r.URL.Query().Get("login_challenge")
	if a == nil || challenge == "" {
		http.Error(w, "no login challenge", http.StatusBadRequest)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	lr, err := a.LoginRequest(ctx, challenge)
	if err != nil {
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
	var next string
	if reject != "" && !lr.Skip {
		next, err = a.RejectLogin(ctx, challenge, "access_denied", reject)
	} else {
		next, err = a.AcceptLogin(ctx, challenge, subject)
		if err == nil {
			p.logins.Add(1)
		}
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	http.Redirect(w, r, next, http.StatusFound)
}

func (p *Provider) consent(w http.ResponseWriter, r *http.Request) {
	a := p.admin()
	challenge := r.URL.Query().Get("consent_challenge")
	if a == nil || challenge == "" {
		http.Error(w, "no consent challenge", http.StatusBadRequest)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	cr, err := a.ConsentRequest(ctx, challenge)
	if err != nil {
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
	var idToken map[string]any
	if claimsOf != nil {
		idToken = claimsOf(cr.Subject)
	}
	next, err := a.AcceptConsent(ctx, challenge, hydralogin.Grant{Scopes: grant, Audiences: cr.RequestedAudience, IDToken: idToken})
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	p.consents.Add(1)
	http.Redirect(w, r, next, http.StatusFound)
}

func (p *Provider) logout(w http.ResponseWriter, r *http.Request) {
	a := p.admin()
	challenge := r.URL.Query().Get("logout_challenge")
	if a == nil || challenge == "" {
		http.Error(w, "no logout challenge", http.StatusBadRequest)
		return
	}
	next, err := a.AcceptLogout(r.Context(), challenge)
	if err != nil {
		http.Error(w, fmt.Sprint(err), http.StatusBadGateway)
		return
	}
	http.Redirect(w, r, next, http.StatusFound)
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
