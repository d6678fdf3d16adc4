package exchange

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"golang.org/x/sync/singleflight"

	"github.com/toolfleet/toolfleet/services/gateway/connections"
)

// Defaults of [Options].
const (
	DefaultCacheSize   = 4096
	DefaultHTTPTimeout = 15 * time.Second
	// DefaultReuseMargin: a cached token is used until this long before it
	// expires, so that a worker never starts with one about to lapse.
	DefaultReuseMargin = time.Minute
)

// Options configure a [Set].
type Options struct {
	// CacheSize bounds the cached tokens (least recently used go first).
	// Default [DefaultCacheSize].
	CacheSize int
	// ReuseMargin: default [DefaultReuseMargin].
	ReuseMargin time.Duration
	// HTTPClient talks to the authorization servers. Default: one with
	// [DefaultHTTPTimeout].
	HTTPClient *http.Client
	// ExchangeTimeout bounds one exchange (callers waiting for it stop
	// earlier when their own context ends). Default [DefaultHTTPTimeout].
	ExchangeTimeout time.Duration
	// Logger. Default slog.Default().
	Logger *slog.Logger
	// Now is the clock (tests). Default time.Now.
	Now func() time.Time
}

// Set is a gateway's exchange providers by name, with the cache of the
// tokens they obtained. Safe for concurrent use.
type Set struct {
	byName map[string]Exchanger
	cache  *lru.Cache[string, Token]
	// flight makes concurrent misses of one key one exchange.
	flight  singleflight.Group
	margin  time.Duration
	timeout time.Duration
	now     func() time.Time
	log     *slog.Logger
}

// New resolves the exchange providers of a connections file
// (connections.Config.Exchanges: OpenID discovery for those naming an
// issuer, their secrets and assertion keys) and returns their set.
func New(ctx context.Context, providers []connections.Provider, opts Options) (*Set, error) {
	if opts.CacheSize <= 0 {
		opts.CacheSize = DefaultCacheSize
	}
	if opts.ReuseMargin <= 0 {
		opts.ReuseMargin = DefaultReuseMargin
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = &http.Client{Timeout: DefaultHTTPTimeout}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.ExchangeTimeout <= 0 {
		opts.ExchangeTimeout = DefaultHTTPTimeout
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	cache, err := lru.New[string, Token](opts.CacheSize)
	if err != nil {
		return nil, err
	}
	s := &Set{byName: map[string]Exchanger{}, cache: cache, margin: opts.ReuseMargin, timeout: opts.ExchangeTimeout, now: opts.Now, log: opts.Logger}
	for i := range providers {
		p := providers[i]
		if p.Exchange == "" {
			return nil, fmt.Errorf("%w: provider %s has no exchange mode", connections.ErrConfig, p.Name)
		}
		if _, dup := s.byName[p.Name]; dup {
			return nil, fmt.Errorf("%w: provider %s configured twice", connections.ErrConfig, p.Name)
		}
		if err := p.Resolve(ctx, opts.HTTPClient); err != nil {
			return nil, err
		}
		ep := endpoint{provider: p.Name, tokenURL: p.TokenURL, clientID: p.ClientID, secret: p.ClientSecret(),
			postStyle: p.AuthStyle == connections.AuthStylePost, hc: opts.HTTPClient, now: opts.Now}
		var sg *signer
		if p.AssertionKeyFile != "" {
			if sg, err = loadSigner(p.AssertionKeyFile, p.AssertionKeyID); err != nil {
				return nil, fmt.Errorf("%w: provider %s: %w", connections.ErrConfig, p.Name, err)
			}
		}
		switch p.Exchange {
		case connections.ExchangeTokenExchange:
			s.byName[p.Name] = &tokenExchange{ep: ep, signer: sg}
		case connections.ExchangeJWTBearer:
			s.byName[p.Name] = &jwtBearer{ep: ep, signer: sg}
		}
	}
	return s, nil
}

// Provides reports whether provider is one of the set's.
func (s *Set) Provides(provider string) bool {
	if s == nil {
		return false
	}
	_, ok := s.byName[provider]
	return ok
}

// Token returns a token for req from provider: a cached one while it is
// good for ReuseMargin more, else a new exchange. A request without a
// subject or an audience is [ErrUnsupported].
func (s *Set) Token(ctx context.Context, provider string, req Request) (Token, error) {
	x, ok := s.byName[provider]
	if !ok {
		return Token{}, fmt.Errorf("%w: %q", ErrUnknownProvider, provider)
	}
	if req.Subject == "" {
		return Token{}, fmt.Errorf("%w: the call has no authenticated principal to act for", ErrUnsupported)
	}
	if req.Audience == "" {
		return Token{}, fmt.Errorf("%w: the tool names no audience for %s", ErrUnsupported, provider)
	}
	req.Scopes = slices.Clone(req.Scopes)
	slices.Sort(req.Scopes)
	req.Scopes = slices.Compact(req.Scopes)
	key := cacheKey(provider, req)
	if t, ok := s.cache.Get(key); ok {
		if t.Expiry.After(s.now().Add(s.margin)) {
			return t, nil
		}
		s.cache.Remove(key)
	}
	// One exchange per key at a time: the callers that miss together share
	// it. It runs without the first caller's cancellation (bounded by
	// ExchangeTimeout), so that one caller going away does not fail
	// the others; each caller still stops waiting when its own ctx ends.
	ch := s.flight.DoChan(key, func() (any, error) {
		xctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.timeout)
		defer cancel()
		t, err := x.Exchange(xctx, req)
		if err != nil {
			s.log.WarnContext(ctx, "token exchange failed", "provider", provider, "audience", req.Audience,
				"subject", req.Subject, "delegate", req.Delegate, "error", err)
			return Token{}, err
		}
		if t.Expiry.After(s.now().Add(s.margin)) {
			s.cache.Add(key, t) // a token without an expiry, or about to lapse, is not kept
		}
		return t, nil
	})
	select {
	case <-ctx.Done():
		return Token{}, ctx.Err()
	case r := <-ch:
		if r.Err != nil {
			return Token{}, r.Err
		}
		return r.Val.(Token), nil
	}
}

// cacheKey names whom a token acts for (principal and delegate), where and
// with what. Each part is length-prefixed: subjects are arbitrary strings,
// and keys of different requests must never collide.
func cacheKey(provider string, req Request) string {
	var b strings.Builder
	for _, part := range []string{provider, req.Subject, req.Delegate, req.Audience, strings.Join(req.Scopes, " ")} {
		b.WriteString(strconv.Itoa(len(part)))
		b.WriteByte(':')
		b.WriteString(part)
	}
	return b.String()
}
