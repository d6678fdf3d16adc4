package console

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
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
}

// sessions is an in-memory session store (one gateway replica's: a
// restart signs everyone out, which the dev sign-in makes cheap).
type sessions struct {
	mu  sync.Mutex
	m   map[string]*session
	ttl time.Duration
	now func() time.Time
}

func newSessions(ttl time.Duration, now func() time.Time) *sessions {
	return &sessions{m: map[string]*session{}, ttl: ttl, now: now}
}

func randomID() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b)
}

// get returns r's live session, or nil.
func (s *sessions) get(r *http.Request) *session {
	c, err := r.Cookie(CookieName)
	if err != nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.m[c.Value]
	if ss == nil {
		return nil
	}
	if s.now().After(ss.expires) {
		delete(s.m, c.Value)
		return nil
	}
	cp := *ss
	return &cp
}

// start stores a new session (a fresh id and CSRF token: an id known before
// sign-in is never the one after it) and sets its cookie.
func (s *sessions) start(w http.ResponseWriter, r *http.Request, fill func(*session)) *session {
	ss := &session{id: randomID(), csrf: randomID(), expires: s.now().Add(s.ttl)}
	if fill != nil {
		fill(ss)
	}
	s.mu.Lock()
	for id, old := range s.m { // drop expired ones while here
		if s.now().After(old.expires) {
			delete(s.m, id)
		}
	}
	s.m[ss.id] = ss
	s.mu.Unlock()
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: ss.id, Path: Prefix, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: !loopback(r), Expires: ss.expires})
	cp := *ss
	return &cp
}

// end forgets r's session and clears its cookie.
func (s *sessions) end(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(CookieName); err == nil {
		s.mu.Lock()
		delete(s.m, c.Value)
		s.mu.Unlock()
	}
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: "", Path: Prefix, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: !loopback(r), MaxAge: -1})
}

// validCSRF reports whether r's form carries ss's CSRF token.
func validCSRF(r *http.Request, ss *session) bool {
	got := r.PostFormValue(csrfField)
	return ss != nil && got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(ss.csrf)) == 1
}

// loopback reports whether r came over plain HTTP to a loopback host, where
// a Secure cookie would never be sent back; everywhere else it is Secure.
func loopback(r *http.Request) bool {
	if r.TLS != nil {
		return false
	}
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return loopbackHost(strings.Trim(host, "[]"))
}

// loopbackHost reports whether host (a name or an address) is loopback only.
func loopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
