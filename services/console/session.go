package console

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net/http"
	"time"

	"github.com/toolfleet/toolfleet/internal/loopback"
)

// CookieName is the console's session cookie. It holds only a random session
// id; the principal's token stays on the server.
const CookieName = "toolfleet_console"

// csrfField is the form field every POST carries the session's CSRF token in.
const csrfField = "csrf"

// session is one browser's state: who it acts as and its CSRF token.
type session struct {
	id      string
	csrf    string
	expires time.Time

	// Set at sign-in (or for every session with auth off).
	signedIn bool
	subject  string
	scopes   []string
	token    string // bearer token for the APIs; "" with auth off

	// Set by the OIDC sign-in (oidc.go): the provider's refresh token, when
	// the access token ends, and until when a replica is renewing it.
	oidc        bool
	refresh     string
	tokenExpiry time.Time
	renewing    time.Time

	rev uint64 // the stored revision this copy was read at
}

// sessions keeps signed-in sessions in a [sessionStore] (one process's
// memory, or a KV bucket every replica shares) and their cookies. A
// signed-out visitor's session is not stored at all: its CSRF token is
// derived from its cookie, so anonymous page views cannot fill the store.
type sessions struct {
	store sessionStore
	ttl   time.Duration
	now   func() time.Time
}

func newSessions(store sessionStore, ttl time.Duration, now func() time.Time) *sessions {
	return &sessions{store: store, ttl: ttl, now: now}
}

func randomID() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b)
}

// csrfFor is the CSRF token of the session id: only who holds the cookie
// (HttpOnly, SameSite=Strict) can know it.
func csrfFor(id string) string {
	sum := sha256.Sum256([]byte("toolfleet console csrf\x00" + id))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// maxCookie bounds the cookie value read (an id is 43 characters).
const maxCookie = 64

func cookieID(r *http.Request) string {
	c, err := r.Cookie(CookieName)
	if err != nil || c.Value == "" || len(c.Value) > maxCookie {
		return ""
	}
	return c.Value
}

// get returns r's session: the stored one when signed in, else a signed-out
// one for its cookie (nil without a cookie). err is a store that does not
// answer.
func (s *sessions) get(r *http.Request) (*session, error) {
	id := cookieID(r)
	if id == "" {
		return nil, nil
	}
	ss, err := s.byID(r.Context(), id)
	if err != nil || ss != nil {
		return ss, err
	}
	return &session{id: id, csrf: csrfFor(id)}, nil
}

// byID returns the live signed-in session id, or nil.
func (s *sessions) byID(ctx context.Context, id string) (*session, error) {
	ss, err := s.store.load(ctx, id)
	if errors.Is(err, errNoSession) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if s.now().After(ss.expires) {
		_ = s.store.remove(ctx, id)
		return nil, nil
	}
	return ss, nil
}

// signedOut starts a signed-out session (a fresh cookie) and returns it.
func (s *sessions) signedOut(w http.ResponseWriter, r *http.Request) *session {
	ss := &session{id: randomID(), expires: s.now().Add(s.ttl)}
	ss.csrf = csrfFor(ss.id)
	s.setCookie(w, r, ss)
	return ss
}

// start stores a new signed-in session (a fresh id: an id known before
// sign-in is never the one after it) and sets its cookie.
func (s *sessions) start(w http.ResponseWriter, r *http.Request, fill func(*session)) (*session, error) {
	ss := &session{id: randomID(), expires: s.now().Add(s.ttl), signedIn: true}
	ss.csrf = csrfFor(ss.id)
	if fill != nil {
		fill(ss)
	}
	if err := s.store.create(r.Context(), ss); err != nil {
		return nil, err
	}
	s.setCookie(w, r, ss)
	return ss, nil
}

func (s *sessions) setCookie(w http.ResponseWriter, r *http.Request, ss *session) {
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: ss.id, Path: Prefix, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: !plainLoopback(r), Expires: ss.expires})
}

// end forgets r's session everywhere and clears its cookie.
func (s *sessions) end(w http.ResponseWriter, r *http.Request) {
	if id := cookieID(r); id != "" {
		_ = s.store.remove(r.Context(), id)
	}
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: "", Path: Prefix, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: !plainLoopback(r), MaxAge: -1})
}

// validCSRF reports whether r's form carries ss's CSRF token.
func validCSRF(r *http.Request, ss *session) bool {
	got := r.PostFormValue(csrfField)
	return ss != nil && got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(ss.csrf)) == 1
}

// plainLoopback reports whether r came over plain HTTP to a loopback host, where
// a Secure cookie would never be sent back; everywhere else it is Secure.
func plainLoopback(r *http.Request) bool {
	if r.TLS != nil {
		return false
	}
	return loopback.Host(r.Host)
}
