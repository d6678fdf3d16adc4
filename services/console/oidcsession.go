package console

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"
)

// Where signed-in sessions live: [sessionStore], kept in one process's
// memory ([memSessions]) or in a KV bucket every gateway replica shares
// (sessionkv.go). Updates compare the revision they read, so two replicas
// renewing one session's token cannot both win.

// Errors of a session store.
var (
	// errNoSession: no such session (never made, ended, or expired).
	errNoSession = errors.New("console: no such session")
	// errConflict: the session changed since it was read.
	errConflict = errors.New("console: the session changed meanwhile")
	// errFull: the store holds as many sessions as it may.
	errFull = errors.New("console: the session store is full")
	// errStore: the store does not answer (e.g. NATS is away).
	errStore = errors.New("console: the session store is not answering")
)

type sessionStore interface {
	// load returns a copy of session id with its revision.
	load(ctx context.Context, id string) (*session, error)
	// create stores a new session.
	create(ctx context.Context, ss *session) error
	// swap replaces the session read at ss.rev with ss and sets ss.rev;
	// errConflict when it changed (or ended) meanwhile.
	swap(ctx context.Context, ss *session) error
	// remove ends session id.
	remove(ctx context.Context, id string) error
}

// maxMemSessions bounds the sessions one process holds in memory.
const maxMemSessions = 10000

// memSessions is one process's session store: behind a load balancer a
// browser then needs affinity, and a restart signs everyone out.
type memSessions struct {
	mu  sync.Mutex
	m   map[string]*session
	rev uint64
	now func() time.Time
}

func newMemSessions(now func() time.Time) *memSessions {
	return &memSessions{m: map[string]*session{}, now: now}
}

func (m *memSessions) load(_ context.Context, id string) (*session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ss := m.m[id]
	if ss == nil {
		return nil, errNoSession
	}
	cp := *ss
	return &cp, nil
}

func (m *memSessions) create(_ context.Context, ss *session) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.m) >= maxMemSessions {
		now := m.now()
		for id, old := range m.m { // drop expired ones first
			if now.After(old.expires) {
				delete(m.m, id)
			}
		}
		if len(m.m) >= maxMemSessions {
			return errFull
		}
	}
	m.rev++
	ss.rev = m.rev
	cp := *ss
	m.m[ss.id] = &cp
	return nil
}

func (m *memSessions) swap(_ context.Context, ss *session) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	cur := m.m[ss.id]
	if cur == nil || cur.rev != ss.rev {
		return errConflict
	}
	m.rev++
	ss.rev = m.rev
	cp := *ss
	m.m[ss.id] = &cp
	return nil
}

func (m *memSessions) remove(_ context.Context, id string) error {
	m.mu.Lock()
	delete(m.m, id)
	m.mu.Unlock()
	return nil
}

// renew refreshes ss's access token shortly before it expires, with the
// refresh token the provider gave (if any). A session whose token cannot be
// renewed ends: nil, and the page sends the browser to sign in again.
// Sessions this sign-in did not make (dev sign-in) pass unchanged.
//
// One replica renews: it first claims the session (a compare-and-swap on
// the revision it read); a replica that loses reads the session again and
// goes on with the token it holds, which is still valid for renewBefore.
// A refresh token used twice would make a provider that rotates them
// revoke the whole grant.
func (s *Server) renew(ctx context.Context, ss *session) *session {
	now := s.cfg.Now()
	if !ss.oidc || ss.tokenExpiry.IsZero() || now.Add(renewBefore).Before(ss.tokenExpiry) {
		return ss
	}
	if ss.refresh == "" {
		_ = s.sessions.store.remove(ctx, ss.id)
		return nil
	}
	if now.Before(ss.renewing) {
		return ss // another request renews it
	}
	claimed, ok := s.claimRenewal(ctx, ss)
	if !ok {
		return claimed
	}
	o := s.oidc
	p, err := o.discover(ctx)
	if err != nil {
		return ss // the provider is away: the API decides whether the token still serves
	}
	cctx, cancel := context.WithTimeout(oidc.ClientContext(ctx, o.cfg.HTTPClient), idpTimeout)
	defer cancel()
	tok, err := o.oauth(p, "").TokenSource(cctx, &oauth2.Token{RefreshToken: claimed.refresh, Expiry: now.Add(-time.Minute)}).Token()
	if err != nil || tok.AccessToken == "" {
		_ = s.sessions.store.remove(ctx, ss.id)
		return nil
	}
	claimed.token, claimed.scopes, claimed.tokenExpiry, claimed.renewing = tok.AccessToken, tokenScopes(tok), tok.Expiry, time.Time{}
	if tok.RefreshToken != "" {
		claimed.refresh = tok.RefreshToken
	}
	if err := s.sessions.store.swap(ctx, claimed); err != nil {
		// Signed out meanwhile (or the store is away): what is stored decides.
		cur, _ := s.sessions.byID(ctx, ss.id)
		return cur
	}
	return claimed
}

// claimRenewal marks ss as being renewed by this request. ok false: another
// request (on any replica) changed it first, and the session as it now is
// (nil when it ended) is returned.
func (s *Server) claimRenewal(ctx context.Context, ss *session) (_ *session, ok bool) {
	claimed := *ss
	claimed.renewing = s.cfg.Now().Add(renewClaim)
	err := s.sessions.store.swap(ctx, &claimed)
	if err == nil {
		return &claimed, true
	}
	if errors.Is(err, errConflict) {
		cur, _ := s.sessions.byID(ctx, ss.id)
		return cur, false
	}
	return ss, false // the store is away: go on with the token held
}

// oidcSignOut revokes ss's refresh token at the provider (RFC 7009) when
// the provider has a revocation endpoint; a failure to revoke does not
// keep anyone signed in (the session itself ends in the store).
func (s *Server) oidcSignOut(ctx context.Context, ss *session) {
	o := s.oidc
	if o == nil || ss == nil || ss.refresh == "" {
		return
	}
	o.mu.Lock()
	revoke := o.revoke
	o.mu.Unlock()
	if revoke == "" {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, idpTimeout)
	defer cancel()
	form := url.Values{"token": {ss.refresh}, "token_type_hint": {"refresh_token"}}
	if o.cfg.ClientSecret == "" {
		form.Set("client_id", o.cfg.ClientID)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, revoke, strings.NewReader(form.Encode()))
	if err != nil {
		return
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if o.cfg.ClientSecret != "" {
		req.SetBasicAuth(url.QueryEscape(o.cfg.ClientID), url.QueryEscape(o.cfg.ClientSecret))
	}
	if resp, err := o.cfg.HTTPClient.Do(req); err == nil {
		resp.Body.Close()
	}
}
