package connections

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/loopback"
)

// Defaults of [Config].
const (
	DefaultMaxPerPrincipal = 32
	DefaultMaxTokenBytes   = 16 << 10
	DefaultRefreshBefore   = 2 * time.Minute
	DefaultStateTTL        = 10 * time.Minute
	DefaultRefreshLease    = 30 * time.Second
	// DefaultHTTPTimeout bounds one request to a provider.
	DefaultHTTPTimeout = 15 * time.Second
	// maxPendingPerPrincipal bounds the connections a principal has started
	// and not finished.
	maxPendingPerPrincipal = 8
	// CallbackPath and StartPath are the gateway paths of the flow.
	StartPath    = "/connections/start"
	CallbackPath = "/connections/callback"
)

// Errors; match them with errors.Is.
var (
	// ErrUnknownProvider: the operator configured no provider of that name.
	ErrUnknownProvider = errors.New("connections: unknown provider")
	// ErrTooMany: the principal holds the most connections (or unfinished
	// connects) it may.
	ErrTooMany = errors.New("connections: too many connections")
	// ErrUnavailable: the store or the provider did not answer; retry.
	ErrUnavailable = errors.New("connections: unavailable")
	// ErrNotConnected is wrapped by [*ConnectError].
	ErrNotConnected = errors.New("connections: not connected")
)

// ConnectError says the principal has to connect (or reconnect, with more
// scopes) before a tool can act with its account. URL starts the connection
// in a browser; it is bound to the principal and used once.
type ConnectError struct {
	Provider string
	Scopes   []string
	URL      string
	// Reason says why in the caller's terms ("not connected", "the
	// connection lacks scopes …", "the provider refused the refresh token").
	Reason string
}

func (e *ConnectError) Error() string {
	return fmt.Sprintf("connect your %s account first (%s): open %s", e.Provider, e.Reason, e.URL)
}

// Unwrap makes errors.Is(err, ErrNotConnected) true.
func (e *ConnectError) Unwrap() error { return ErrNotConnected }

// Config configures a [Service].
type Config struct {
	// Providers are the authorization servers principals may connect to.
	Providers []Provider
	// Exchanges are the file's exchange providers (Provider.Exchange set):
	// [LoadFile] keeps them here for package exchange; [New] ignores them.
	Exchanges []Provider
	// KeyRing seals the stored tokens (required).
	KeyRing *KeyRing
	// PublicURL is the gateway's origin as browsers reach it
	// ("https://tools.example.com"); the redirect URI registered at every
	// provider is PublicURL + [CallbackPath].
	PublicURL string
	// Bucket is the KV bucket of connections (jsassets.Connections).
	Bucket jetstream.KeyValueConfig
	// MaxPerPrincipal bounds one principal's connections. Default [DefaultMaxPerPrincipal].
	MaxPerPrincipal int
	// MaxTokenBytes bounds one token a provider returns. Default [DefaultMaxTokenBytes].
	MaxTokenBytes int
	// RefreshBefore: an access token expiring sooner is refreshed first.
	// Default [DefaultRefreshBefore].
	RefreshBefore time.Duration
	// StateTTL bounds the time from starting a connection to its callback.
	// Default [DefaultStateTTL].
	StateTTL time.Duration
	// RefreshLease bounds one replica's refresh; another replica takes over
	// after it. Default [DefaultRefreshLease].
	RefreshLease time.Duration
	// HTTPClient talks to providers. Default: one with [DefaultHTTPTimeout].
	HTTPClient *http.Client
	// Logger. Default slog.Default().
	Logger *slog.Logger
	// Now is the clock (tests). Default time.Now.
	Now func() time.Time
}

// Service is the gateway's connections: the flow's HTTP endpoints, the
// tokens of calls, listing and revoking.
type Service struct {
	cfg       Config
	providers map[string]*Provider
	st        store
	log       *slog.Logger
	resumers  []Resumer
}

// New checks cfg, resolves the providers (OpenID discovery for those naming
// an issuer), creates or updates the bucket and returns the service.
func New(ctx context.Context, js jetstream.JetStream, cfg Config) (*Service, error) {
	if cfg.KeyRing == nil {
		return nil, fmt.Errorf("%w: no key ring", ErrConfig)
	}
	u, err := url.Parse(cfg.PublicURL)
	if err != nil || (u.Scheme != "https" && !(u.Scheme == "http" && loopback.Host(u.Hostname()))) || u.Host == "" || (u.Path != "" && u.Path != "/") {
		return nil, fmt.Errorf("%w: public URL %q must be an https origin (http only on loopback)", ErrConfig, cfg.PublicURL)
	}
	cfg.PublicURL = strings.TrimSuffix(cfg.PublicURL, "/")
	if cfg.MaxPerPrincipal <= 0 {
		cfg.MaxPerPrincipal = DefaultMaxPerPrincipal
	}
	if cfg.MaxTokenBytes <= 0 {
		cfg.MaxTokenBytes = DefaultMaxTokenBytes
	}
	if cfg.RefreshBefore <= 0 {
		cfg.RefreshBefore = DefaultRefreshBefore
	}
	if cfg.StateTTL <= 0 {
		cfg.StateTTL = DefaultStateTTL
	}
	if cfg.RefreshLease <= 0 {
		cfg.RefreshLease = DefaultRefreshLease
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: DefaultHTTPTimeout}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Service{cfg: cfg, providers: map[string]*Provider{}, log: cfg.Logger}
	if cfg.Bucket.Bucket == "" {
		return nil, fmt.Errorf("%w: no bucket name", ErrConfig)
	}
	for i := range cfg.Providers {
		p := cfg.Providers[i]
		if _, dup := s.providers[p.Name]; dup {
			return nil, fmt.Errorf("%w: provider %s configured twice", ErrConfig, p.Name)
		}
		if p.Exchange != "" {
			return nil, fmt.Errorf("%w: provider %s is an exchange provider (package exchange), not one to connect to", ErrConfig, p.Name)
		}
		if err := p.resolve(ctx, cfg.HTTPClient); err != nil {
			return nil, err
		}
		s.providers[p.Name] = &p
	}
	// Pending connects expire by themselves (per-key TTL needs markers).
	cfg.Bucket.History = 1
	if cfg.Bucket.LimitMarkerTTL == 0 {
		cfg.Bucket.LimitMarkerTTL = time.Minute
	}
	s.st = store{js: js, kvc: cfg.Bucket, ring: cfg.KeyRing}
	if _, err := s.st.bucket(ctx); err != nil {
		// Made on first use instead (NATS may come later).
		s.log.Warn("connections bucket not ready; retried on first use", "error", err)
	}
	return s, nil
}

// Providers lists the configured provider names, sorted.
func (s *Service) Providers() []string {
	var out []string
	for n := range s.providers {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// List returns subject's connections, sorted by provider. A record that no
// longer opens (its key left the key ring) is listed with its provider only,
// so that the principal can revoke and reconnect it.
func (s *Service) List(ctx context.Context, subject string) ([]Connection, error) {
	keys, err := s.st.keys(ctx, connPrefix+subjectKey(subject)+".*")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	out := make([]Connection, 0, len(keys))
	for _, k := range keys {
		var r record
		if _, err := s.st.get(ctx, k, &r); err != nil {
			if errors.Is(err, errNoRecord) {
				continue
			}
			if errors.Is(err, ErrSealed) {
				out = append(out, Connection{Provider: k[strings.LastIndexByte(k, '.')+1:]})
				continue
			}
			return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		if r.Subject != subject { // a hash collision, or a record moved: never someone else's
			continue
		}
		out = append(out, r.public())
	}
	slices.SortFunc(out, func(a, b Connection) int { return strings.Compare(a.Provider, b.Provider) })
	return out, nil
}

// Revoke deletes subject's connection to provider and revokes its tokens at
// the provider (RFC 7009) when it has a revocation endpoint. Revoking a
// connection that does not exist is not an error (found is false). The
// connection is gone even when the provider does not answer; that error is
// returned (wrapping [ErrUnavailable]) so that the caller can say so.
func (s *Service) Revoke(ctx context.Context, subject, provider string) (found bool, err error) {
	p, ok := s.providers[provider]
	if !ok {
		return false, fmt.Errorf("%w: %q", ErrUnknownProvider, provider)
	}
	key := connKey(subject, provider)
	var r record
	_, err = s.st.get(ctx, key, &r)
	switch {
	case errors.Is(err, errNoRecord):
		return false, nil
	case err != nil && !errors.Is(err, ErrSealed):
		return false, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if err := s.st.delete(ctx, key); err != nil {
		return true, fmt.Errorf("%w: delete: %w", ErrUnavailable, err)
	}
	if r.Subject != subject || p.RevocationURL == "" {
		return true, nil
	}
	var errs []error
	if r.Refresh != "" {
		errs = append(errs, s.revokeAt(ctx, p, r.Refresh, "refresh_token"))
	}
	errs = append(errs, s.revokeAt(ctx, p, r.Access.Value, "access_token"))
	if err := errors.Join(errs...); err != nil {
		return true, fmt.Errorf("%w: the connection is deleted, but %s did not confirm revoking its tokens: %w", ErrUnavailable, provider, err)
	}
	return true, nil
}

// revokeAt asks the provider to revoke one token (RFC 7009 §2.1). Errors
// never carry the token.
func (s *Service) revokeAt(ctx context.Context, p *Provider, tok, hint string) error {
	if tok == "" {
		return nil
	}
	form := url.Values{"token": {tok}, "token_type_hint": {hint}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.RevocationURL, strings.NewReader(form.Encode()))
	if err != nil {
		return fmt.Errorf("revocation request: %w", errors.New("malformed"))
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(url.QueryEscape(p.ClientID), url.QueryEscape(p.secret))
	resp, err := s.cfg.HTTPClient.Do(req)
	if err != nil {
		return fmt.Errorf("revoke %s: %w", hint, redactURLError(err))
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("revoke %s: status %d", hint, resp.StatusCode)
	}
	return nil
}

// redactURLError keeps the operation and cause of a transport error but not
// its URL or body (a revocation body holds the token).
func redactURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("%s %s: %w", ue.Op, redactQuery(ue.URL), ue.Err)
	}
	return err
}

func redactQuery(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(URL)"
	}
	u.RawQuery, u.User = "", nil
	return u.String()
}

// randomString returns n random bytes as base64url-like text without padding.
func randomString() string { return rand.Text() }
