package auth

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/time/rate"
	"google.golang.org/grpc/codes"
)

// Config configures bearer-token authentication. One of the key sources
// (HS256Secret, JWKSFile, JWKSURL) is set unless Disabled; HS256Secret may
// stand beside a JWKS (as `toolfleet dev` with an identity provider has it):
// then HS256 tokens are the fleet's own, minted with the shared secret and
// free of the Issuer and Audience rules, and RS256/ES256 tokens verify
// against the JWKS and must pass those rules.
type Config struct {
	// Disabled turns authentication off. Only allowed on a loopback listener.
	Disabled bool
	// HS256Secret is a shared secret for HS256 tokens.
	HS256Secret []byte
	// JWKSFile and JWKSURL hold RS256/ES256 public keys as a JSON Web Key Set.
	// A URL is refetched every JWKSRefresh, and at once (at most once a
	// minute) when a token names an unknown kid; keys removed from the set stop
	// verifying tokens after the next fetch.
	JWKSFile string
	JWKSURL  string
	// JWKSRefresh is how often a JWKS URL is refetched. Default [DefaultJWKSRefresh].
	JWKSRefresh time.Duration
	// Audience, when set, must be in the token's aud claim.
	Audience string
	// Issuer, when set, must equal the token's iss claim (of JWKS tokens only
	// when HS256Secret is set too).
	Issuer string
}

// DefaultJWKSRefresh is how often a JWKS URL is refetched.
const DefaultJWKSRefresh = 15 * time.Minute

// Cache bounds: verified tokens live at most verifiedTTL (and never past exp).
const (
	verifiedTTL = 5 * time.Minute
	maxVerified = 10000
)

// Authenticator verifies bearer tokens.
type Authenticator struct {
	cfg    Config
	parser *jwt.Parser // the one key source's; with two, JWKS tokens'
	// hsParser reads the HS256 tokens when a JWKS stands beside the secret.
	hsParser *jwt.Parser
	keys     keyfunc.Keyfunc
	// verified caches principals by token: a caller reuses its token for many
	// calls, and verifying a signature costs more than the rest of the pipeline.
	verified sync.Map // string → verifiedToken
	cached   atomic.Int64
}

type verifiedToken struct {
	p     *Principal
	until time.Time
}

// New validates cfg and loads the keys. A JWKS URL is fetched now (an
// unreachable URL is an error) and then refreshed in the background until ctx
// ends: pass a context that lives as long as the gateway.
func New(ctx context.Context, log *slog.Logger, cfg Config) (*Authenticator, error) {
	a := &Authenticator{cfg: cfg}
	if cfg.Disabled {
		return a, nil
	}
	base := []jwt.ParserOption{jwt.WithExpirationRequired(), jwt.WithLeeway(30 * time.Second)}
	opts := base
	if cfg.Audience != "" {
		opts = append(opts, jwt.WithAudience(cfg.Audience))
	}
	if cfg.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(cfg.Issuer))
	}
	if len(cfg.HS256Secret) > 0 && (cfg.JWKSFile != "" || cfg.JWKSURL != "") {
		a.hsParser = jwt.NewParser(append(base, jwt.WithValidMethods([]string{"HS256"}))...)
	}
	var err error
	switch {
	case len(cfg.HS256Secret) > 0 && a.hsParser == nil:
		opts = append(opts, jwt.WithValidMethods([]string{"HS256"}))
	case cfg.JWKSFile != "":
		opts = append(opts, jwt.WithValidMethods([]string{"RS256", "ES256"}))
		var raw []byte
		if raw, err = os.ReadFile(cfg.JWKSFile); err == nil {
			a.keys, err = keyfunc.NewJWKSetJSON(json.RawMessage(raw))
		}
	case cfg.JWKSURL != "":
		opts = append(opts, jwt.WithValidMethods([]string{"RS256", "ES256"}))
		refresh := cfg.JWKSRefresh
		if refresh <= 0 {
			refresh = DefaultJWKSRefresh
		}
		failFirst := false
		a.keys, err = keyfunc.NewDefaultOverrideCtx(ctx, []string{cfg.JWKSURL}, keyfunc.Override{
			HTTPTimeout:               10 * time.Second,
			RefreshInterval:           refresh,
			RefreshUnknownKID:         rate.NewLimiter(rate.Every(time.Minute), 1),
			RateLimitWaitMax:          time.Second, // a token with an unknown kid waits at most this for a refetch
			NoErrorReturnFirstHTTPReq: &failFirst,
			RefreshErrorHandlerFunc: func(u string) func(context.Context, error) {
				return func(ctx context.Context, err error) {
					log.WarnContext(ctx, "JWKS refresh failed; keeping the last keys", "url", u, "error", err)
				}
			},
		})
	default:
		return nil, errors.New("gateway: auth needs an HS256 secret, a JWKS file or a JWKS URL (or auth disabled on loopback)")
	}
	if err != nil {
		return nil, fmt.Errorf("gateway: load JWKS: %w", err)
	}
	a.parser = jwt.NewParser(opts...)
	return a, nil
}

// claims are the registered claims plus the scope forms in common use.
type claims struct {
	jwt.RegisteredClaims
	Scope  string   `json:"scope,omitempty"` // OAuth 2: space-separated
	Scp    []string `json:"scp,omitempty"`
	Scopes []string `json:"scopes,omitempty"`
}

// MaxAuthorizationBytes bounds an Authorization header (all its values): real
// bearer tokens are a few KiB at most. The gateway refuses a longer one on
// every surface as soon as the headers are in, before it reads the body, and
// Authenticate before it parses or caches anything.
const MaxAuthorizationBytes = 16 << 10

// TooLong is the refusal of an Authorization header of n bytes, over
// MaxAuthorizationBytes.
func TooLong(n int) *Error {
	return refuse(codes.Unauthenticated, ErrUnauthenticated,
		fmt.Sprintf("the Authorization header is %d bytes", n),
		"the Authorization header is over %d KiB: no bearer token is that long", MaxAuthorizationBytes>>10)
}

// Authenticate checks an Authorization header value ("Bearer <jwt>"). With auth
// off every caller is [AnonymousPrincipal].
func (a *Authenticator) Authenticate(ctx context.Context, header string) (*Principal, *Error) {
	if a.cfg.Disabled {
		return AnonymousPrincipal, nil
	}
	if len(header) > MaxAuthorizationBytes {
		return nil, TooLong(len(header))
	}
	token, ok := strings.CutPrefix(header, "Bearer ")
	if !ok || token == "" {
		return nil, refuse(codes.Unauthenticated, ErrUnauthenticated, "", "a bearer token is required (Authorization: Bearer <jwt>)")
	}
	if v, ok := a.verified.Load(token); ok {
		if vt := v.(verifiedToken); time.Now().Before(vt.until) {
			return vt.p, nil
		}
		a.verified.Delete(token)
		a.cached.Add(-1)
	}
	var c claims
	parser := a.parser
	keyOf := func(*jwt.Token) (any, error) { return a.cfg.HS256Secret, nil }
	if a.keys != nil && (a.hsParser == nil || headerAlg(token) != "HS256") {
		keyOf = a.keys.KeyfuncCtx(ctx)
	} else if a.hsParser != nil {
		parser = a.hsParser
	}
	if _, err := parser.ParseWithClaims(token, &c, keyOf); err != nil {
		return nil, refuse(codes.Unauthenticated, ErrUnauthenticated, err.Error(), "the bearer token is not valid")
	}
	if c.Subject == "" {
		// Results and approvals are scoped by subject: a token without one could
		// not be told apart from another tenant's.
		return nil, refuse(codes.Unauthenticated, ErrUnauthenticated, "the token has no sub claim", "the bearer token has no subject")
	}
	p := &Principal{Subject: c.Subject, Scopes: append(append(strings.Fields(c.Scope), c.Scp...), c.Scopes...), bearer: &bearerToken{token}}
	until := time.Now().Add(verifiedTTL)
	if c.ExpiresAt != nil && c.ExpiresAt.Before(until) {
		until = c.ExpiresAt.Time
	}
	if a.cached.Add(1) > maxVerified {
		a.verified.Clear()
		a.cached.Store(1)
	}
	a.verified.Store(token, verifiedToken{p, until})
	return p, nil
}

// headerAlg is the alg a JWT's header names ("" when it names none). It
// only picks the key source: the parser still checks the method and the
// signature.
func headerAlg(token string) string {
	head, _, ok := strings.Cut(token, ".")
	if !ok || len(head) > 1024 {
		return ""
	}
	raw, err := base64.RawURLEncoding.DecodeString(head)
	if err != nil {
		return ""
	}
	var h struct {
		Alg string `json:"alg"`
	}
	if json.Unmarshal(raw, &h) != nil {
		return ""
	}
	return h.Alg
}

// Credentials are what a request presents about its caller, on any surface.
type Credentials struct {
	// Authorization is the Authorization value ("Bearer <jwt>").
	Authorization string
	// OnBehalfOf and OnBehalfScopes are the delegation metadata, if any.
	OnBehalfOf     string
	OnBehalfScopes string
}

// Principal authenticates creds and applies delegation: the effective principal
// of a delegated call is the named subject with exactly the named scopes, and
// the delegate is kept as Via. With auth off, a delegated call that names no
// scopes stays unrestricted (the run was started by the anonymous principal,
// which holds every scope).
func (a *Authenticator) Principal(ctx context.Context, creds Credentials) (*Principal, *Error) {
	p, err := a.Authenticate(ctx, creds.Authorization)
	if err != nil || (creds.OnBehalfOf == "" && creds.OnBehalfScopes == "") {
		return p, err
	}
	if !p.Has(ScopeDelegate) {
		return nil, refuse(codes.PermissionDenied, ErrPermissionDenied, "",
			"calling on behalf of another principal (%s) needs the %s scope", HeaderOnBehalfOf, ScopeDelegate)
	}
	if creds.OnBehalfOf == "" {
		return nil, refuse(codes.InvalidArgument, ErrBadDelegation, "", "%s is set but %s is missing", HeaderOnBehalfScopes, HeaderOnBehalfOf)
	}
	scopes := strings.Fields(creds.OnBehalfScopes)
	return &Principal{Subject: creds.OnBehalfOf, Scopes: scopes, Anonymous: p.Anonymous && len(scopes) == 0, Via: p}, nil
}
