package hydralogin

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/toolfleet/toolfleet/internal/loopback"
)

// subjectPattern is what a name typed on the login page may be.
var subjectPattern = regexp.MustCompile(`^[A-Za-z0-9._@:-]{1,128}$`)

// DefaultSubject is the name the login page suggests when the client sent
// no login_hint.
const DefaultSubject = "alice"

const (
	csrfCookie = "hydralogin_csrf"
	// adminTimeout bounds each request's calls to the admin API.
	adminTimeout = 15 * time.Second
	// maxForm bounds a posted form.
	maxForm = 16 << 10
)

// App is the login and consent app. Its handler serves /login, /consent,
// /logout (Hydra's URLS_LOGIN, URLS_CONSENT, URLS_LOGOUT) and / (what to
// configure).
type App struct {
	admin *Admin
	log   *slog.Logger
}

// New returns the app that tells admin what people decide. log nil: slog's
// default.
func New(admin *Admin, log *slog.Logger) *App {
	if log == nil {
		log = slog.Default()
	}
	return &App{admin: admin, log: log}
}

// Handler serves the app's pages.
func (a *App) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", a.home)
	mux.HandleFunc("GET /style.css", serveStyle)
	mux.HandleFunc("GET /login", a.loginPage)
	mux.HandleFunc("POST /login", a.loginDecision)
	mux.HandleFunc("GET /consent", a.consentPage)
	mux.HandleFunc("POST /consent", a.consentDecision)
	mux.HandleFunc("GET /logout", a.logout)
	return guard(mux)
}

// guard refuses a Host that is not a loopback name (DNS rebinding) and sets
// the headers every page has.
func guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !loopback.Host(r.Host) {
			http.Error(w, "this development login app answers only on a loopback address", http.StatusMisdirectedRequest)
			return
		}
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; frame-ancestors 'none'; base-uri 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

func (a *App) home(w http.ResponseWriter, r *http.Request) {
	base := "http://" + r.Host
	render(w, http.StatusOK, homePage, map[string]string{"Base": base})
}

func (a *App) loginPage(w http.ResponseWriter, r *http.Request) {
	challenge := r.URL.Query().Get("login_challenge")
	ctx, cancel := context.WithTimeout(r.Context(), adminTimeout)
	defer cancel()
	lr, err := a.admin.LoginRequest(ctx, challenge)
	if err != nil {
		a.fail(w, "read the login request", err)
		return
	}
	if lr.Skip { // Hydra remembers this person: no page
		next, err := a.admin.AcceptLogin(ctx, challenge, lr.Subject)
		if err != nil {
			a.fail(w, "accept the login", err)
			return
		}
		http.Redirect(w, r, next, http.StatusFound)
		return
	}
	subject := DefaultSubject
	if h := lr.OIDCContext.LoginHint; subjectPattern.MatchString(h) {
		subject = h
	}
	render(w, http.StatusOK, loginPage, map[string]any{
		"Challenge": challenge, "Subject": subject, "Client": lr.Client.Label(),
		"Scopes": lr.RequestedScope, "CSRF": csrfToken(w, r),
	})
}

func (a *App) loginDecision(w http.ResponseWriter, r *http.Request) {
	a.decide(w, r, "login", func(ctx context.Context, challenge string) (string, error) {
		subject := strings.TrimSpace(r.PostFormValue("subject"))
		if !subjectPattern.MatchString(subject) {
			return "", badForm("the name must be 1–128 letters, digits or . _ @ : -")
		}
		return a.admin.AcceptLogin(ctx, challenge, subject)
	}, func(ctx context.Context, challenge string) (string, error) {
		return a.admin.RejectLogin(ctx, challenge, "access_denied", "the person cancelled the sign-in")
	})
}

func (a *App) consentPage(w http.ResponseWriter, r *http.Request) {
	challenge := r.URL.Query().Get("consent_challenge")
	ctx, cancel := context.WithTimeout(r.Context(), adminTimeout)
	defer cancel()
	cr, err := a.admin.ConsentRequest(ctx, challenge)
	if err != nil {
		a.fail(w, "read the consent request", err)
		return
	}
	if cr.Skip { // granted before: Hydra asks not to show a page
		next, err := a.admin.AcceptConsent(ctx, challenge, Grant{Scopes: cr.RequestedScope, Audiences: cr.RequestedAudience})
		if err != nil {
			a.fail(w, "accept the consent", err)
			return
		}
		http.Redirect(w, r, next, http.StatusFound)
		return
	}
	render(w, http.StatusOK, consentPage, map[string]any{
		"Challenge": challenge, "Subject": cr.Subject, "Client": cr.Client.Label(),
		"Scopes": cr.RequestedScope, "Audiences": cr.RequestedAudience, "CSRF": csrfToken(w, r),
	})
}

func (a *App) consentDecision(w http.ResponseWriter, r *http.Request) {
	a.decide(w, r, "consent", func(ctx context.Context, challenge string) (string, error) {
		// Grant only what was asked for and ticked: a forged form cannot
		// add a scope or an audience the client did not request.
		cr, err := a.admin.ConsentRequest(ctx, challenge)
		if err != nil {
			return "", err
		}
		ticked := r.PostForm["scope"]
		var grant []string
		for _, s := range cr.RequestedScope {
			if slices.Contains(ticked, s) {
				grant = append(grant, s)
			}
		}
		return a.admin.AcceptConsent(ctx, challenge, Grant{Scopes: grant, Audiences: cr.RequestedAudience})
	}, func(ctx context.Context, challenge string) (string, error) {
		return a.admin.RejectConsent(ctx, challenge, "access_denied", "the person declined")
	})
}

// badForm is a decision refused for what the person typed (400).
type badForm string

func (b badForm) Error() string { return string(b) }

// decide reads a posted decision (checked form, action accept or deny),
// tells Hydra with accept or deny, and sends the browser where Hydra says.
func (a *App) decide(w http.ResponseWriter, r *http.Request, what string, accept, deny func(ctx context.Context, challenge string) (string, error)) {
	if !a.checkForm(w, r) {
		return
	}
	challenge := r.PostFormValue("challenge")
	ctx, cancel := context.WithTimeout(r.Context(), adminTimeout)
	defer cancel()
	var (
		next string
		err  error
	)
	switch r.PostFormValue("action") {
	case "accept":
		next, err = accept(ctx, challenge)
	case "deny":
		next, err = deny(ctx, challenge)
	default:
		http.Error(w, "unknown action", http.StatusBadRequest)
		return
	}
	var bad badForm
	if errors.As(err, &bad) {
		http.Error(w, bad.Error(), http.StatusBadRequest)
		return
	}
	if err != nil {
		a.fail(w, "tell hydra the "+what+" decision", err)
		return
	}
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (a *App) logout(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), adminTimeout)
	defer cancel()
	next, err := a.admin.AcceptLogout(ctx, r.URL.Query().Get("logout_challenge"))
	if err != nil {
		a.fail(w, "accept the logout", err)
		return
	}
	http.Redirect(w, r, next, http.StatusFound)
}

// checkForm parses a bounded form and checks its CSRF token against the
// cookie; it answers the refusal itself.
func (a *App) checkForm(w http.ResponseWriter, r *http.Request) bool {
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "the form could not be read", http.StatusBadRequest)
		return false
	}
	c, err := r.Cookie(csrfCookie)
	got := r.PostFormValue("csrf")
	if err != nil || c.Value == "" || subtle.ConstantTimeCompare([]byte(c.Value), []byte(got)) != 1 {
		http.Error(w, "this form is stale or was not sent from this page: open the sign-in again", http.StatusForbidden)
		return false
	}
	return true
}

// fail answers an admin API failure: a challenge Hydra does not know (used,
// expired or made up) is the person's 4xx, the rest a 502.
func (a *App) fail(w http.ResponseWriter, what string, err error) {
	var ae *AdminError
	if errors.As(err, &ae) && ae.Status/100 == 4 {
		http.Error(w, "Hydra does not know this request (used, expired or not from Hydra): start the sign-in again", http.StatusBadRequest)
		return
	}
	if errors.Is(err, ErrNoChallenge) {
		http.Error(w, "open this page through Hydra's sign-in, not directly", http.StatusBadRequest)
		return
	}
	a.log.Warn("hydra login app: "+what, "err", err)
	http.Error(w, fmt.Sprintf("could not %s: is Hydra's admin API reachable?", what), http.StatusBadGateway)
}

// csrfToken is the browser's CSRF token, set as a cookie on first use.
func csrfToken(w http.ResponseWriter, r *http.Request) string {
	if c, err := r.Cookie(csrfCookie); err == nil && len(c.Value) == 64 {
		return c.Value
	}
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	v := hex.EncodeToString(b)
	http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: v, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
	return v
}
