package gateway

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"os"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// Scopes a caller's token carries.
const (
	// ScopeCall allows calling every tool (besides the tools' own required scopes).
	ScopeCall = "tools:call"
	// ScopeCallPrefix starts toolkit patterns such as "tools:call:calculator.*".
	ScopeCallPrefix = "tools:call:"
	// ScopeApprove allows approving a call of a tool whose contract requires
	// approval, by naming the approver in the request (CallToolRequest.approval).
	ScopeApprove = "tools:approve"
	// ScopeDelegate allows calling on behalf of another principal (the
	// orchestrator's own identity holds it), with [HeaderOnBehalfOf].
	ScopeDelegate = "tools:delegate"
)

// Delegation metadata (gRPC metadata or HTTP headers, the same on every surface):
// honoured only when the authenticated caller holds [ScopeDelegate].
const (
	// HeaderOnBehalfOf names the subject the call is made for.
	HeaderOnBehalfOf = "toolfleet-on-behalf-of"
	// HeaderOnBehalfScopes lists that subject's scopes, space-separated.
	HeaderOnBehalfScopes = "toolfleet-on-behalf-scopes"
)

// AnonymousSubject is the subject of the fixed principal used when auth is off.
const AnonymousSubject = "anonymous"

// AuthConfig configures bearer-token authentication. Exactly one of the key
// sources (HS256Secret, JWKSFile, JWKSURL) is set unless Disabled.
type AuthConfig struct {
	// Disabled turns authentication off. Only allowed on a loopback listener.
	Disabled bool
	// HS256Secret is a shared secret for HS256 tokens.
	HS256Secret []byte
	// JWKSFile and JWKSURL hold RS256/ES256 public keys as a JSON Web Key Set.
	JWKSFile string
	JWKSURL  string
	// Audience, when set, must be in the token's aud claim.
	Audience string
	// Issuer, when set, must equal the token's iss claim.
	Issuer string
}

// Principal is an authenticated caller, or the principal a delegate calls for.
type Principal struct {
	Subject string
	Scopes  []string
	// Anonymous is true when authentication is disabled: the principal counts as
	// holding every scope.
	Anonymous bool
	// Via is the authenticated delegate when the call is made on behalf of
	// Subject (see [HeaderOnBehalfOf]); nil for a direct call.
	Via *Principal
}

// subject is the principal's subject, [AnonymousSubject] for the anonymous one.
func (p *Principal) subject() string {
	if p.Subject == "" && p.Anonymous {
		return AnonymousSubject
	}
	return p.Subject
}

// has reports whether p holds scope (the anonymous principal holds every scope).
func (p *Principal) has(scope string) bool {
	if p.Anonymous {
		return true
	}
	for _, s := range p.Scopes {
		if s == scope {
			return true
		}
	}
	return false
}

// transport is the principal that authenticated the call: the delegate of a
// delegated call, else p itself.
func (p *Principal) transport() *Principal {
	if p.Via != nil {
		return p.Via
	}
	return p
}

// Credentials are what a request presents about its caller, on any surface.
type Credentials struct {
	// Authorization is the Authorization value ("Bearer <jwt>").
	Authorization string
	// OnBehalfOf and OnBehalfScopes are the delegation metadata, if any.
	OnBehalfOf     string
	OnBehalfScopes string
}

// principal authenticates creds and applies delegation: the effective principal
// of a delegated call is the named subject with exactly the named scopes, and the
// delegate is kept as Via. With auth off, a delegated call that names no scopes
// stays unrestricted (the run was started by the anonymous principal, which holds
// every scope).
func (a *authenticator) principal(ctx context.Context, creds Credentials) (*Principal, *CallError) {
	p, ce := a.authenticate(ctx, creds.Authorization)
	if ce != nil || (creds.OnBehalfOf == "" && creds.OnBehalfScopes == "") {
		return p, ce
	}
	if !p.has(ScopeDelegate) {
		return nil, serverError(codes.PermissionDenied, ErrPermissionDenied, "",
			"calling on behalf of another principal (%s) needs the %s scope", HeaderOnBehalfOf, ScopeDelegate)
	}
	if creds.OnBehalfOf == "" {
		return nil, serverError(codes.InvalidArgument, nil, "", "%s is set but %s is missing", HeaderOnBehalfScopes, HeaderOnBehalfOf)
	}
	scopes := strings.Fields(creds.OnBehalfScopes)
	return &Principal{Subject: creds.OnBehalfOf, Scopes: scopes, Anonymous: p.Anonymous && len(scopes) == 0, Via: p}, nil
}

// authenticator verifies bearer tokens.
type authenticator struct {
	cfg    AuthConfig
	parser *jwt.Parser
	keys   *jwks
	// verified caches principals by token: a caller reuses its token for many
	// calls, and verifying a signature costs more than the rest of the pipeline.
	verified sync.Map // string → verifiedToken
	cached   atomic.Int64
}

type verifiedToken struct {
	p     *Principal
	until time.Time
}

// Cache bounds: entries live at most verifiedTTL (and never past exp).
const (
	verifiedTTL = 5 * time.Minute
	maxVerified = 10000
)

func newAuthenticator(ctx context.Context, cfg AuthConfig) (*authenticator, error) {
	a := &authenticator{cfg: cfg}
	if cfg.Disabled {
		return a, nil
	}
	opts := []jwt.ParserOption{jwt.WithExpirationRequired(), jwt.WithLeeway(30 * time.Second)}
	if cfg.Audience != "" {
		opts = append(opts, jwt.WithAudience(cfg.Audience))
	}
	if cfg.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(cfg.Issuer))
	}
	switch {
	case len(cfg.HS256Secret) > 0:
		opts = append(opts, jwt.WithValidMethods([]string{"HS256"}))
	case cfg.JWKSFile != "" || cfg.JWKSURL != "":
		opts = append(opts, jwt.WithValidMethods([]string{"RS256", "ES256"}))
		a.keys = &jwks{file: cfg.JWKSFile, url: cfg.JWKSURL}
		if err := a.keys.load(ctx); err != nil {
			return nil, err
		}
	default:
		return nil, errors.New("gateway: auth needs an HS256 secret, a JWKS file or a JWKS URL (or auth disabled on loopback)")
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

// anonymous is the fixed principal of a gateway with auth off (read-only).
var anonymous = &Principal{Subject: AnonymousSubject, Anonymous: true}

// authenticate checks the Authorization header value ("Bearer <jwt>").
func (a *authenticator) authenticate(ctx context.Context, header string) (*Principal, *CallError) {
	if a.cfg.Disabled {
		return anonymous, nil
	}
	token, ok := strings.CutPrefix(header, "Bearer ")
	if !ok || token == "" {
		return nil, serverError(codes.Unauthenticated, ErrUnauthenticated, "", "a bearer token is required (Authorization: Bearer <jwt>)")
	}
	if v, ok := a.verified.Load(token); ok {
		if vt := v.(verifiedToken); time.Now().Before(vt.until) {
			return vt.p, nil
		}
		a.verified.Delete(token)
		a.cached.Add(-1)
	}
	var c claims
	_, err := a.parser.ParseWithClaims(token, &c, func(t *jwt.Token) (any, error) {
		if a.keys == nil {
			return a.cfg.HS256Secret, nil
		}
		kid, _ := t.Header["kid"].(string)
		return a.keys.key(ctx, kid)
	})
	if err != nil {
		return nil, serverError(codes.Unauthenticated, ErrUnauthenticated, err.Error(), "the bearer token is not valid")
	}
	if c.Subject == "" {
		// Results and approvals are scoped by subject: a token without one could
		// not be told apart from another tenant's.
		return nil, serverError(codes.Unauthenticated, ErrUnauthenticated, "the token has no sub claim", "the bearer token has no subject")
	}
	p := &Principal{Subject: c.Subject, Scopes: append(append(strings.Fields(c.Scope), c.Scp...), c.Scopes...)}
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

// authorize checks that p may call def: tools:call or a matching toolkit pattern,
// plus every scope the tool's contract requires.
func (p *Principal) authorize(def *toolfleetv1.ToolDefinition) *CallError {
	if p.Anonymous {
		return nil
	}
	name := def.GetToolkit() + "." + def.GetName()
	allowed := false
	have := map[string]bool{}
	for _, s := range p.Scopes {
		have[s] = true
		if s == ScopeCall {
			allowed = true
		} else if pat, ok := strings.CutPrefix(s, ScopeCallPrefix); ok {
			if m, _ := path.Match(strings.ToLower(pat), strings.ToLower(name)); m {
				allowed = true
			}
		}
	}
	if !allowed {
		return serverError(codes.PermissionDenied, ErrPermissionDenied, "",
			"the token has neither %s nor %s%s", ScopeCall, ScopeCallPrefix, strings.ToLower(def.GetToolkit())+".*")
	}
	for _, s := range def.GetRequirements().GetScopes() {
		if !have[s] {
			return serverError(codes.PermissionDenied, ErrPermissionDenied, "", "%s requires the scope %q", def.GetId(), s)
		}
	}
	return nil
}

// jwks holds public keys by kid, from a file or a URL (refetched when an unknown
// kid shows up, at most once a minute).
type jwks struct {
	file, url string
	mu        sync.Mutex
	keys      map[string]any
	fetched   time.Time
}

func (k *jwks) key(ctx context.Context, kid string) (any, error) {
	k.mu.Lock()
	key, ok := k.keys[kid]
	if !ok && kid == "" && len(k.keys) == 1 {
		for _, only := range k.keys { // a token without kid, and only one key to try
			key, ok = only, true
		}
	}
	stale := k.url != "" && time.Since(k.fetched) > time.Minute
	k.mu.Unlock()
	if ok {
		return key, nil
	}
	if stale {
		if err := k.load(ctx); err != nil {
			return nil, err
		}
		k.mu.Lock()
		key, ok = k.keys[kid]
		k.mu.Unlock()
		if ok {
			return key, nil
		}
	}
	return nil, fmt.Errorf("no key with kid %q", kid)
}

func (k *jwks) load(ctx context.Context) error {
	var body []byte
	var err error
	if k.file != "" {
		body, err = os.ReadFile(k.file)
	} else {
		body, err = fetchJWKS(ctx, k.url)
	}
	if err != nil {
		return fmt.Errorf("gateway: load JWKS: %w", err)
	}
	keys, err := parseJWKS(body)
	if err != nil {
		return fmt.Errorf("gateway: load JWKS: %w", err)
	}
	k.mu.Lock()
	k.keys, k.fetched = keys, time.Now()
	k.mu.Unlock()
	return nil
}

func fetchJWKS(ctx context.Context, url string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return io.ReadAll(io.LimitReader(resp.Body, 1<<20))
}

// parseJWKS reads RSA and P-256 EC public keys of a JSON Web Key Set (RFC 7517).
func parseJWKS(body []byte) (map[string]any, error) {
	var set struct {
		Keys []struct {
			Kty, Kid, Crv, N, E, X, Y string
		} `json:"keys"`
	}
	if err := json.Unmarshal(body, &set); err != nil {
		return nil, err
	}
	b64 := func(s string) *big.Int {
		b, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(s, "="))
		if err != nil || len(b) == 0 {
			return nil
		}
		return new(big.Int).SetBytes(b)
	}
	keys := map[string]any{}
	for _, k := range set.Keys {
		switch k.Kty {
		case "RSA":
			n, e := b64(k.N), b64(k.E)
			if n == nil || e == nil {
				return nil, fmt.Errorf("RSA key %q: bad n or e", k.Kid)
			}
			keys[k.Kid] = &rsa.PublicKey{N: n, E: int(e.Int64())}
		case "EC":
			x, y := b64(k.X), b64(k.Y)
			if k.Crv != "P-256" || x == nil || y == nil {
				return nil, fmt.Errorf("EC key %q: want crv P-256 with x and y", k.Kid)
			}
			keys[k.Kid] = &ecdsa.PublicKey{Curve: elliptic.P256(), X: x, Y: y}
		}
	}
	if len(keys) == 0 {
		return nil, errors.New("no RSA or EC keys in the set")
	}
	return keys, nil
}

// approve checks a call of a tool whose contract requires approval: the request
// names an approver and the caller that presented it (for a delegated call, the
// delegate) holds [ScopeApprove]. It returns the approval to record, with its
// time filled in; nil for a tool that needs none.
func (p *Principal) approve(def *toolfleetv1.ToolDefinition, a *toolfleetv1.Approval) (*toolfleetv1.Approval, *CallError) {
	if !def.GetRequirements().GetRequiresApproval() {
		return nil, nil
	}
	how := fmt.Sprintf("a caller holding the %s scope names the approver in the request (approval.approver), "+
		"or an agent run calls it after a human approved the call", ScopeApprove)
	switch {
	case a.GetApprover() == "":
		return nil, serverError(codes.FailedPrecondition, ErrApprovalRequired, "",
			"%s requires an approval before it runs: %s", def.GetId(), how)
	case !p.transport().has(ScopeApprove):
		return nil, serverError(codes.FailedPrecondition, ErrApprovalRequired, "",
			"%s requires an approval, and this caller may not give one: %s", def.GetId(), how)
	}
	out := &toolfleetv1.Approval{Approver: a.GetApprover(), ApprovedAt: a.GetApprovedAt()}
	if out.ApprovedAt == nil {
		out.ApprovedAt = timestamppb.Now()
	}
	return out, nil
}
