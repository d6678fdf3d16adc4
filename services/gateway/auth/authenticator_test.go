package auth_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/grpc/codes"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/services/gateway/auth"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

type key struct {
	kid string
	k   *ecdsa.PrivateKey
}

func newKey(t *testing.T, kid string) key {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key{kid, k}
}

func jwks(keys ...key) []byte {
	b64 := func(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }
	var set []map[string]any
	for _, k := range keys {
		set = append(set, map[string]any{"kty": "EC", "kid": k.kid, "crv": "P-256", "alg": "ES256",
			"x": b64(k.k.X.FillBytes(make([]byte, 32))), "y": b64(k.k.Y.FillBytes(make([]byte, 32)))})
	}
	b, _ := json.Marshal(map[string]any{"keys": set})
	return b
}

func (k key) sign(t *testing.T, sub string) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{"sub": sub, "scope": "tools:call", "exp": time.Now().Add(time.Minute).Unix()})
	tok.Header["kid"] = k.kid
	s, err := tok.SignedString(k.k)
	if err != nil {
		t.Fatal(err)
	}
	return "Bearer " + s
}

// TestJWKSRotation: a token signed with a key the set did not hold yet makes the
// authenticator refetch the set at once; a key removed from the set stops
// verifying tokens once the set was refetched.
func TestJWKSRotation(t *testing.T) {
	t.Parallel()
	k1, k2 := newKey(t, "k1"), newKey(t, "k2")
	var set atomic.Pointer[[]byte]
	body := jwks(k1)
	set.Store(&body)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(*set.Load())
	}))
	t.Cleanup(srv.Close)
	a, err := auth.New(t.Context(), quiet(), auth.Config{JWKSURL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	check := func(step, header string, want codes.Code) {
		t.Helper()
		_, e := a.Authenticate(t.Context(), header)
		got := codes.OK
		if e != nil {
			got = e.Code
		}
		if got != want {
			t.Fatalf("%s: %v (%v), want %v", step, got, e, want)
		}
	}
	check("k1 in the set", k1.sign(t, "ana"), codes.OK)
	rotated := jwks(k2)
	set.Store(&rotated)
	check("k2 after rotation: refetched on the unknown kid", k2.sign(t, "bo"), codes.OK)
	check("k1 removed from the set", k1.sign(t, "cy"), codes.Unauthenticated)
}

func TestNoSubject(t *testing.T) {
	t.Parallel()
	secret := []byte("test-secret-test-secret-test-secret")
	a, err := auth.New(t.Context(), quiet(), auth.Config{HS256Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"scope": "tools:call", "exp": time.Now().Add(time.Minute).Unix()}).SignedString(secret)
	if _, e := a.Authenticate(t.Context(), "Bearer "+s); e == nil || e.Code != codes.Unauthenticated {
		t.Fatalf("token without sub: %v, want Unauthenticated", e)
	}
}

// TestDelegationAndApproval covers the rules of package auth without a
// gateway; services/gateway's TestApprovals runs them end to end.
func TestDelegationAndApproval(t *testing.T) {
	t.Parallel()
	needs := &toolfleetv1.ToolDefinition{Id: "KV.Delete@1.0.0", Toolkit: "KV", Name: "Delete",
		Requirements: &toolfleetv1.ToolRequirements{RequiresApproval: true}}
	orch := &auth.Principal{Subject: "orch", Scopes: []string{auth.ScopeDelegate, auth.ScopeApprove}}
	ana := &auth.Principal{Subject: "ana", Scopes: []string{auth.ScopeCall}, Via: orch}
	approval := &toolfleetv1.Approval{Approver: "boss"}
	tests := []struct {
		name string
		p    *auth.Principal
		a    *toolfleetv1.Approval
		want codes.Code
	}{
		{"delegate holds approve", ana, approval, codes.OK},
		{"no approval", ana, nil, codes.FailedPrecondition},
		{"empty approver", ana, &toolfleetv1.Approval{}, codes.FailedPrecondition},
		{"direct caller without approve", &auth.Principal{Subject: "ana", Scopes: []string{auth.ScopeCall}}, approval, codes.FailedPrecondition},
		{"anonymous may approve", auth.AnonymousPrincipal, approval, codes.OK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, e := tt.p.Approve(needs, tt.a)
			switch {
			case tt.want == codes.OK && (e != nil || got.GetApprover() != "boss" || got.GetApprovedAt() == nil):
				t.Fatalf("got %v %v, want the approval with a time", got, e)
			case tt.want != codes.OK && (e == nil || e.Code != tt.want):
				t.Fatalf("got %v, want %v", e, tt.want)
			}
		})
	}
	if got, e := ana.Approve(&toolfleetv1.ToolDefinition{}, nil); got != nil || e != nil {
		t.Fatalf("a tool without requires_approval: %v %v", got, e)
	}
}

// TestSecretBesideJWKS: with an HS256 secret beside a JWKS (dev with an
// identity provider), the fleet's own HS256 tokens verify with the secret
// and need no issuer, while the provider's tokens verify against the JWKS
// and must carry its issuer and audience; neither key source stands in for
// the other.
func TestSecretBesideJWKS(t *testing.T) {
	t.Parallel()
	k := newKey(t, "idp-1")
	file := t.TempDir() + "/jwks.json"
	if err := os.WriteFile(file, jwks(k), 0o600); err != nil {
		t.Fatal(err)
	}
	secret := []byte("the-fleet-secret-the-fleet-secret")
	a, err := auth.New(t.Context(), quiet(), auth.Config{HS256Secret: secret, JWKSFile: file, Issuer: "https://idp.test/", Audience: "fleet"})
	if err != nil {
		t.Fatal(err)
	}
	exp := time.Now().Add(time.Minute).Unix()
	es := func(claims jwt.MapClaims) string {
		tok := jwt.NewWithClaims(jwt.SigningMethodES256, claims)
		tok.Header["kid"] = k.kid
		s, err := tok.SignedString(k.k)
		if err != nil {
			t.Fatal(err)
		}
		return "Bearer " + s
	}
	hs := func(key []byte, claims jwt.MapClaims) string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return "Bearer " + s
	}
	pub, err := x509.MarshalPKIXPublicKey(&k.k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, header string
		want         string // subject; "" = refused
	}{
		{"provider token with issuer and audience", es(jwt.MapClaims{"sub": "ada", "iss": "https://idp.test/", "aud": "fleet", "exp": exp}), "ada"},
		{"provider token without issuer", es(jwt.MapClaims{"sub": "ada", "aud": "fleet", "exp": exp}), ""},
		{"provider token for another audience", es(jwt.MapClaims{"sub": "ada", "iss": "https://idp.test/", "aud": "other", "exp": exp}), ""},
		{"the fleet's own token", hs(secret, jwt.MapClaims{"sub": "orchestrator", "exp": exp}), "orchestrator"},
		{"HS256 with another secret", hs([]byte("not-the-secret-not-the-secret-xx"), jwt.MapClaims{"sub": "eve", "exp": exp}), ""},
		{"HS256 keyed with the provider's public key", hs(pub, jwt.MapClaims{"sub": "eve", "iss": "https://idp.test/", "aud": "fleet", "exp": exp}), ""},
	} {
		p, aerr := a.Authenticate(t.Context(), tc.header)
		switch {
		case tc.want == "" && aerr == nil:
			t.Errorf("%s: accepted as %q", tc.name, p.Subject)
		case tc.want != "" && (aerr != nil || p.Subject != tc.want):
			t.Errorf("%s: %v, %v; want %q", tc.name, p, aerr, tc.want)
		}
	}
}

// TestBearer: a principal keeps the token it authenticated with, for token
// exchange, without printing it; the principal a delegate calls for has
// none (its delegate's is the delegate's), and auth off has none.
func TestBearer(t *testing.T) {
	t.Parallel()
	secret := []byte("bearer-test-secret-0123456789abcdef")
	a, err := auth.New(t.Context(), quiet(), auth.Config{HS256Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	sign := func(sub, scope string) string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": sub, "scope": scope, "exp": time.Now().Add(time.Minute).Unix()}).SignedString(secret)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	alice := sign("alice", auth.ScopeCall)
	for range 2 { // verified, then from the cache
		p, e := a.Authenticate(t.Context(), "Bearer "+alice)
		if e != nil || p.Bearer() != alice {
			t.Fatalf("alice: %v, bearer kept %v", e, p.Bearer() == alice)
		}
		if s := fmt.Sprintf("%v %+v %#v", p, *p, p); strings.Contains(s, alice) {
			t.Fatalf("a principal prints its token: %s", s)
		}
	}
	orch := sign("orch", auth.ScopeDelegate)
	p, e := a.Principal(t.Context(), auth.Credentials{Authorization: "Bearer " + orch, OnBehalfOf: "alice", OnBehalfScopes: auth.ScopeCall})
	if e != nil || p.Bearer() != "" || p.Via.Bearer() != orch {
		t.Fatalf("delegated: %v, principal's bearer %q, delegate's kept %v", e, p.Bearer(), p.Via.Bearer() == orch)
	}
	if auth.AnonymousPrincipal.Bearer() != "" || (*auth.Principal)(nil).Bearer() != "" {
		t.Fatal("no token, no bearer")
	}
}
