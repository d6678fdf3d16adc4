package tokenexchange_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// This file is the identity provider of the delegated test: zitadel's
// example OpenID Provider (its real token endpoint: request parsing, client
// authentication, token types, issuing) over the example storage, with what
// an operator configures in their own IdP to let the gateway act for its
// principals. None of it is toolfleet code; it stands for the operator's IdP.

// serviceClient is a client of the client credentials grant (a workload such
// as the orchestrator) and the scopes the IdP lets it ask for.
type serviceClient struct {
	secret string
	scopes []string
}

// delegatingIdP is the example storage plus:
//   - trust in the gateway's assertion key as an issuer of subject tokens
//     (VerifyExchangeSubjectToken: signature, iss, aud, exp; the sub);
//   - service clients that sign in with the client credentials grant and
//     receive JWT access tokens for the gateway (the delegate's bearer token,
//     later the exchange's actor_token, which the library verifies itself);
//   - the delegation policy: the issued token's act names the actor.
type delegatingIdP struct {
	*storage.Storage
	issuer     string
	gatewayID  string           // the gateway's client id: iss of its subject tokens
	gatewayKey *ecdsa.PublicKey // the gateway's assertion key, public half
	apiAud     string           // the audience of service tokens (the gateway as an API)
	services   map[string]serviceClient
	subjects   atomic.Int64 // subject tokens presented to VerifyExchangeSubjectToken
}

// jwtAccess is a client whose access tokens are JWTs (the example's are
// opaque), so that the delegate's token verifies at the gateway by the OP's
// JWKS and the issued token's act can be read.
type jwtAccess struct {
	op.Client
	grants []oidc.GrantType // nil: the client's own
}

func (jwtAccess) AccessTokenType() op.AccessTokenType { return op.AccessTokenTypeJWT }

func (c jwtAccess) GrantTypes() []oidc.GrantType {
	if c.grants != nil {
		return c.grants
	}
	return c.Client.GrantTypes()
}

// GetClientByClientID issues the gateway's exchanged tokens as JWTs.
func (s *delegatingIdP) GetClientByClientID(ctx context.Context, id string) (op.Client, error) {
	c, err := s.Storage.GetClientByClientID(ctx, id)
	if err != nil || id != s.gatewayID {
		return c, err
	}
	return jwtAccess{Client: c}, nil
}

// ClientCredentials authenticates a service client.
func (s *delegatingIdP) ClientCredentials(_ context.Context, id, secret string) (op.Client, error) {
	svc, ok := s.services[id]
	if !ok || subtle.ConstantTimeCompare([]byte(svc.secret), []byte(secret)) != 1 {
		return nil, errors.New("wrong service client or secret")
	}
	return jwtAccess{Client: storage.WebClient(id, secret), grants: []oidc.GrantType{oidc.GrantTypeClientCredentials}}, nil
}

// ClientCredentialsTokenRequest grants a service client only its own
// scopes, for the gateway's audience.
func (s *delegatingIdP) ClientCredentialsTokenRequest(_ context.Context, id string, scopes []string) (op.TokenRequest, error) {
	svc, ok := s.services[id]
	if !ok {
		return nil, errors.New("wrong service client")
	}
	for _, sc := range scopes {
		if !slices.Contains(svc.scopes, sc) {
			return nil, oidc.ErrInvalidScope().WithDescription("scope %s is not granted to %s", sc, id)
		}
	}
	return &oidc.JWTTokenRequest{Subject: id, Audience: []string{s.apiAud}, Scopes: scopes}, nil
}

// VerifyExchangeSubjectToken accepts a subject JWT the gateway signed for a
// principal: the library reaches it for tokens it did not issue itself.
func (s *delegatingIdP) VerifyExchangeSubjectToken(_ context.Context, token string, tokenType oidc.TokenType) (string, string, map[string]any, error) {
	s.subjects.Add(1)
	if tokenType != oidc.JWTTokenType {
		return "", "", nil, fmt.Errorf("subject token type %s is not trusted", tokenType)
	}
	claims := jwt.MapClaims{}
	_, err := jwt.ParseWithClaims(token, claims, func(*jwt.Token) (any, error) { return s.gatewayKey, nil },
		jwt.WithValidMethods([]string{"ES256", "RS256"}), jwt.WithIssuer(s.gatewayID), jwt.WithAudience(s.tokenURL()),
		jwt.WithExpirationRequired(), jwt.WithIssuedAt(), jwt.WithLeeway(30*time.Second))
	if err != nil {
		return "", "", nil, fmt.Errorf("subject token: %w", err)
	}
	sub, err := claims.GetSubject()
	if err != nil || sub == "" {
		return "", "", nil, errors.New("subject token: no sub")
	}
	return token, sub, claims, nil
}

// VerifyExchangeActorToken refuses: actor tokens are the OP's own, which the
// library verifies before it would ask here.
func (s *delegatingIdP) VerifyExchangeActorToken(context.Context, string, oidc.TokenType) (string, string, map[string]any, error) {
	return "", "", nil, errors.New("only actor tokens this IdP issued are accepted")
}

// ValidateTokenExchangeRequest keeps the example's rules (a subject without
// impersonation permission needs an actor) and adds the IdP's delegation
// policy for the gateway's subject tokens: there must be an actor, and it
// must be the delegate the gateway says it acts for (the innermost act.sub of
// the subject token), so one delegate's token cannot carry another's chain.
func (s *delegatingIdP) ValidateTokenExchangeRequest(ctx context.Context, req op.TokenExchangeRequest) error {
	if req.GetExchangeSubjectTokenType() == oidc.JWTTokenType {
		if req.GetExchangeActor() == "" {
			return oidc.ErrInvalidRequest().WithDescription("a gateway subject token needs an actor_token")
		}
		if innermostActor(req.GetExchangeSubjectTokenClaims()) != req.GetExchangeActor() {
			return oidc.ErrInvalidRequest().WithDescription("the actor is not the delegate the subject token names")
		}
	}
	return s.Storage.ValidateTokenExchangeRequest(ctx, req)
}

// innermostActor is the sub of the deepest act of claims.
func innermostActor(claims map[string]any) string {
	sub := ""
	for act, ok := claims["act"].(map[string]any); ok; act, ok = act["act"].(map[string]any) {
		sub, _ = act["sub"].(string)
	}
	return sub
}

// GetPrivateClaimsFromTokenExchangeRequest is the IdP's delegation policy
// (RFC 8693 §4.1): the issued token's act is the actor that presented its
// token, nesting the actor token's own act chain, if any.
func (s *delegatingIdP) GetPrivateClaimsFromTokenExchangeRequest(ctx context.Context, req op.TokenExchangeRequest) (map[string]any, error) {
	claims, err := s.Storage.GetPrivateClaimsFromTokenExchangeRequest(ctx, req)
	if err != nil {
		return nil, err
	}
	claims = withScope(claims, req.GetScopes())
	if req.GetExchangeActor() == "" {
		return claims, nil
	}
	act := map[string]any{"sub": req.GetExchangeActor()}
	if prior, ok := req.GetExchangeActorTokenClaims()["act"]; ok {
		act["act"] = prior
	}
	claims["act"] = act
	return claims, nil
}

// GetPrivateClaimsFromRequest puts the granted scopes into the JWT access
// tokens of the other grants (the service clients' tokens): the library's
// JWTs carry no scope claim of their own, and the gateway reads a caller's
// scopes (tools:delegate) from it.
func (s *delegatingIdP) GetPrivateClaimsFromRequest(ctx context.Context, req op.TokenRequest, scopes []string) (map[string]any, error) {
	claims, err := s.Storage.GetPrivateClaimsFromScopes(ctx, req.GetSubject(), "", scopes)
	if err != nil {
		return nil, err
	}
	return withScope(claims, scopes), nil
}

// withScope adds the OAuth 2 scope claim (space-separated) to claims.
func withScope(claims map[string]any, scopes []string) map[string]any {
	if claims == nil {
		claims = map[string]any{}
	}
	if len(scopes) > 0 {
		claims["scope"] = strings.Join(scopes, " ")
	}
	return claims
}

// SetIntrospectionFromToken also answers the token's sub (RFC 7662), which
// the example sets only for the openid scope.
func (s *delegatingIdP) SetIntrospectionFromToken(ctx context.Context, in *oidc.IntrospectionResponse, tokenID, subject, clientID string) error {
	if err := s.Storage.SetIntrospectionFromToken(ctx, in, tokenID, subject, clientID); err != nil {
		return err
	}
	in.Subject = subject
	return nil
}

func (s *delegatingIdP) tokenURL() string { return strings.TrimSuffix(s.issuer, "/") + "/oauth/token" }

// withUsers adds principals to the example's users (the exchanged token's
// sub must be a user for introspection to answer active).
type withUsers struct {
	storage.UserStore
	extra map[string]*storage.User
}

func (u withUsers) GetUserByID(id string) *storage.User {
	if x, ok := u.extra[id]; ok {
		return x
	}
	return u.UserStore.GetUserByID(id)
}

// startDelegatingOP serves idp (issuer and storage filled in here) on
// loopback until t ends and returns its issuer (ending with a slash).
func startDelegatingOP(t *testing.T, idp *delegatingIdP, users ...string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	idp.issuer = "http://" + ln.Addr().String() + "/"
	us := withUsers{UserStore: storage.NewUserStore(idp.issuer), extra: map[string]*storage.User{}}
	for _, id := range users {
		us.extra[id] = &storage.User{ID: id, Username: id + "@example.com", FirstName: id}
	}
	idp.Storage = storage.NewStorage(us)
	router := exampleop.SetupServer(idp.issuer, idp, slog.New(slog.NewTextHandler(io.Discard, nil)), false)
	srv := &http.Server{Handler: router, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return idp.issuer
}
