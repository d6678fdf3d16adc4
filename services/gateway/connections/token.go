package connections

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/services/gateway/internal/tokenendpoint"
)

// Token is an access token handed to one call's worker.
type Token struct {
	// Value is the token (a secret: never log it).
	Value string
	// Type is its type, usually "Bearer".
	Type string
	// Expiry is when it expires (zero: unknown).
	Expiry time.Time
	// ConnectionID names the connection it came from (for audit).
	ConnectionID string
	// Scopes are the scopes it carries.
	Scopes []string
}

// String never shows the token.
func (t Token) String() string { return "connections.Token(" + t.ConnectionID + ")" }

// GoString never shows the token either (%#v).
func (t Token) GoString() string { return t.String() }

// LogValue keeps the token out of structured logs.
func (t Token) LogValue() slog.Value { return slog.StringValue(t.String()) }

// pollEvery is how often a replica waiting for another's refresh looks again.
const pollEvery = 50 * time.Millisecond

// Token returns an access token of subject's connection to the credential's
// provider carrying the credential's scopes, refreshing it first when it
// expires within RefreshBefore. Across replicas sharing the bucket exactly one
// refreshes at a time (a lease written with compare-and-swap); the others
// wait for its result. A principal who must connect (no connection, missing
// scopes, a refresh token the provider refuses) gets a [*ConnectError]; a
// provider or store that does not answer, [ErrUnavailable].
func (s *Service) Token(ctx context.Context, subject string, cred *toolfleetv1.ToolCredential) (Token, error) {
	p, ok := s.providers[cred.GetProvider()]
	if !ok {
		return Token{}, fmt.Errorf("%w: %q", ErrUnknownProvider, cred.GetProvider())
	}
	key := connKey(subject, p.Name)
	want := slices.Clone(cred.GetScopes())
	deadline := s.cfg.Now().Add(s.cfg.RefreshLease + 5*time.Second)
	for {
		var r record
		rev, err := s.st.get(ctx, key, &r)
		switch {
		case errors.Is(err, errNoRecord):
			return Token{}, s.connectError(ctx, subject, p.Name, want, "not connected")
		case errors.Is(err, ErrSealed):
			s.log.Warn("connection does not open with the key ring; asking to reconnect", "provider", p.Name, "error", err)
			return Token{}, s.connectError(ctx, subject, p.Name, want, "the stored connection can no longer be read")
		case err != nil:
			return Token{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		if r.Subject != subject {
			return Token{}, s.connectError(ctx, subject, p.Name, want, "not connected")
		}
		if missing := without(want, r.Scopes); len(missing) > 0 {
			return Token{}, s.connectError(ctx, subject, p.Name, union(r.Scopes, want),
				"the connection lacks scopes "+strings.Join(missing, " "))
		}
		slot := s.slot(p, want, r.Scopes)
		now := s.cfg.Now()
		cur := r.Access
		if slot != "" {
			cur = r.Narrowed[slot]
		}
		if cur.Value != "" && (cur.Expiry.IsZero() || cur.Expiry.After(now.Add(s.cfg.RefreshBefore))) {
			return s.token(r, cur, slot), nil
		}
		if r.Refresh == "" {
			if cur.Value != "" && cur.Expiry.After(now) {
				return s.token(r, cur, slot), nil // expiring, and nothing to refresh it with
			}
			return Token{}, s.connectError(ctx, subject, p.Name, r.Scopes, "the access token expired and the provider gave no refresh token")
		}
		if r.RefreshingUntil.After(now) {
			// Another replica refreshes: wait for its record.
			if now.After(deadline) {
				return Token{}, fmt.Errorf("%w: another gateway replica is refreshing the %s connection", ErrUnavailable, p.Name)
			}
			if err := sleep(ctx, pollEvery); err != nil {
				return Token{}, err
			}
			continue
		}
		r.RefreshingUntil = now.Add(s.cfg.RefreshLease)
		leaseRev, err := s.st.put(ctx, key, r, rev)
		if err != nil {
			if isRevisionConflict(err) {
				continue // another replica took the lease (or changed the record) first
			}
			return Token{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		return s.refresh(ctx, p, key, r, leaseRev, slot)
	}
}

// slot is where the token for want lives: "" for the connection's own token,
// or the scope set of a narrowed one (providers with NarrowScopes, when want
// is a strict subset of the granted scopes).
func (s *Service) slot(p *Provider, want, granted []string) string {
	if !p.NarrowScopes || len(without(granted, want)) == 0 {
		return ""
	}
	w := slices.Clone(want)
	slices.Sort(w)
	return strings.Join(slices.Compact(w), " ")
}

// refresh renews the token of slot while holding the lease (record r at
// revision leaseRev), stores the result and releases the lease.
func (s *Service) refresh(ctx context.Context, p *Provider, key string, r record, leaseRev uint64, slot string) (Token, error) {
	var scope string
	if slot != "" {
		scope = slot
	}
	tok, refreshTok, err := s.refreshGrant(ctx, p, r.Refresh, scope)
	if err != nil {
		var oe *oauthError
		if errors.As(err, &oe) && oe.Code == "invalid_grant" {
			// The provider no longer accepts the refresh token (expired, revoked):
			// the connection is dead. Delete it only if nobody changed it meanwhile.
			_ = s.st.delete(ctx, key, jetstream.LastRevision(leaseRev))
			s.log.Info("connection's refresh token refused; asking to reconnect", "provider", p.Name, "connection", r.ID)
			return Token{}, s.connectError(ctx, r.Subject, p.Name, r.Scopes, "the provider no longer accepts the connection")
		}
		r.RefreshingUntil = time.Time{}
		if _, perr := s.st.put(ctx, key, r, leaseRev); perr != nil {
			s.log.Warn("connections: could not release a refresh lease; it expires by itself", "provider", p.Name, "error", perr)
		}
		return Token{}, fmt.Errorf("%w: refresh at %s: %w", ErrUnavailable, p.Name, err)
	}
	now := s.cfg.Now()
	if slot == "" {
		r.Access = tok
		r.Refreshed = now
	} else {
		if r.Narrowed == nil {
			r.Narrowed = map[string]token{}
		}
		r.Narrowed[slot] = tok
	}
	if refreshTok != "" {
		r.Refresh = refreshTok // the provider rotates refresh tokens
	}
	r.RefreshingUntil = time.Time{}
	if _, err := s.st.put(ctx, key, r, leaseRev); err != nil {
		// The lease ran out and another replica took over: its record wins. With
		// rotating refresh tokens ours may now be the only valid one; say so.
		s.log.Warn("connections: refreshed tokens not stored (the refresh lease ran out); the next call may ask to reconnect",
			"provider", p.Name, "connection", r.ID, "error", err)
	}
	return s.token(r, tok, slot), nil
}

func (s *Service) token(r record, t token, slot string) Token {
	scopes := r.Scopes
	if slot != "" {
		scopes = strings.Fields(slot)
	}
	return Token{Value: t.Value, Type: cmpOr(t.Type, "Bearer"), Expiry: t.Expiry, ConnectionID: r.ID, Scopes: slices.Clone(scopes)}
}

// oauthError is a token endpoint's error answer (RFC 6749 §5.2); its
// description is not kept (it may quote the request).
type oauthError struct {
	Status int
	Code   string
}

func (e *oauthError) Error() string { return fmt.Sprintf("status %d, error %q", e.Status, e.Code) }

// refreshGrant runs the refresh_token grant (RFC 6749 §6), asking for scope
// when it is not empty. It returns the new access token and, when the
// provider rotated it, the new refresh token.
func (s *Service) refreshGrant(ctx context.Context, p *Provider, refresh, scope string) (token, string, error) {
	form := url.Values{"grant_type": {"refresh_token"}, "refresh_token": {refresh}}
	if scope != "" {
		form.Set("scope", scope)
	}
	c := tokenendpoint.Client{HTTP: s.cfg.HTTPClient, TokenURL: p.TokenURL, ClientID: p.ClientID, Secret: p.secret,
		PostAuth: p.AuthStyle == AuthStylePost}
	a, err := c.Post(ctx, form)
	if err != nil {
		return token{}, "", err
	}
	if !a.OK() {
		return token{}, "", &oauthError{Status: a.Status, Code: a.Error}
	}
	if a.AccessToken == "" || len(a.AccessToken) > s.cfg.MaxTokenBytes || len(a.RefreshToken) > s.cfg.MaxTokenBytes {
		return token{}, "", fmt.Errorf("status %d, no access token or a token over %d bytes", a.Status, s.cfg.MaxTokenBytes)
	}
	return token{Value: a.AccessToken, Type: a.TokenType, Expiry: a.Expiry(s.cfg.Now())}, a.RefreshToken, nil
}

// isRevisionConflict reports a compare-and-swap that lost.
func isRevisionConflict(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, jetstream.ErrKeyExists) ||
		(errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence)
}

// without returns the elements of want not in have.
func without(want, have []string) []string {
	var out []string
	for _, w := range want {
		if !slices.Contains(have, w) {
			out = append(out, w)
		}
	}
	return out
}

func union(a, b []string) []string {
	out := slices.Concat(a, b)
	slices.Sort(out)
	return slices.Compact(out)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
