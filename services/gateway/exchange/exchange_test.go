package exchange_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/toolfleet/toolfleet/services/gateway/connections"
	"github.com/toolfleet/toolfleet/services/gateway/exchange"
)

// as is an authorization server's token endpoint for the tests: it checks
// the client's authentication, records every form and answers with the
// next token (or the configured error).
type as struct {
	t      *testing.T
	srv    *httptest.Server
	mu     sync.Mutex
	forms  []url.Values
	n      atomic.Int64
	status int    // an error answer's status (0: success)
	code   string // its error code
	ttl    int    // expires_in of the tokens
}

func newAS(t *testing.T) *as {
	a := &as{t: t, ttl: 3600}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id, sec, ok := r.BasicAuth(); !ok || id != "toolfleet" || sec != "s3cret" {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":"invalid_client"}`))
			return
		}
		if err := r.ParseForm(); err != nil {
			t.Errorf("form: %v", err)
		}
		a.mu.Lock()
		a.forms = append(a.forms, r.PostForm)
		status, code, ttl := a.status, a.code, a.ttl
		a.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if status != 0 {
			w.WriteHeader(status)
			// The description quotes what the server got: it must not reach the caller.
			_ = json.NewEncoder(w).Encode(map[string]string{"error": code, "error_description": "bad subject_token " + r.PostForm.Get("subject_token")})
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"access_token": fmt.Sprintf("issued-%d", a.n.Add(1)), "token_type": "Bearer",
			"expires_in": ttl, "issued_token_type": exchange.TokenTypeAccess})
	}))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *as) fail(status int, code string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.status, a.code = status, code
}

func (a *as) form(i int) url.Values {
	a.mu.Lock()
	defer a.mu.Unlock()
	if i >= len(a.forms) {
		a.t.Fatalf("the server got %d requests, want more than %d", len(a.forms), i)
	}
	return a.forms[i]
}

func (a *as) requests() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.forms)
}

// keyFile writes a P-256 private key (PKCS #8 PEM) and returns its path and
// public key.
func keyFile(t *testing.T) (string, *ecdsa.PublicKey) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "assertion.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, &k.PublicKey
}

func secretFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(path, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

type clock struct{ off atomic.Int64 }

func (c *clock) now() time.Time          { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *clock) advance(d time.Duration) { c.off.Add(int64(d)) }

func newSet(t *testing.T, a *as, mode, key string, opts exchange.Options) *exchange.Set {
	t.Helper()
	p := connections.Provider{Name: "corp", TokenURL: a.srv.URL + "/token", ClientID: "toolfleet", ClientSecretFile: secretFile(t),
		Exchange: mode, AssertionKeyFile: key, AssertionKeyID: "gw-1"}
	s, err := exchange.New(t.Context(), []connections.Provider{p}, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// assertionClaims verifies an assertion with pub and returns its claims.
func assertionClaims(t *testing.T, raw string, pub *ecdsa.PublicKey) jwt.MapClaims {
	t.Helper()
	var c jwt.MapClaims
	tok, err := jwt.ParseWithClaims(raw, &c, func(*jwt.Token) (any, error) { return pub, nil }, jwt.WithValidMethods([]string{"ES256"}))
	if err != nil {
		t.Fatalf("assertion: %v", err)
	}
	if tok.Header["kid"] != "gw-1" {
		t.Errorf("assertion kid %v, want gw-1", tok.Header["kid"])
	}
	return c
}

func wantForm(t *testing.T, got url.Values, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if g := got[k]; len(g) != 1 || g[0] != v {
			t.Errorf("form %s = %q, want %q", k, g, v)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("form has %s = %q, which it should not", k, got[k])
		}
	}
}

// The RFC 8693 wire form, field by field: a direct call presents the
// caller's own token; a delegated one a subject JWT the gateway signs, with
// the delegate's token as the actor.
func TestTokenExchangeWire(t *testing.T) {
	t.Parallel()
	a := newAS(t)
	key, pub := keyFile(t)
	s := newSet(t, a, connections.ExchangeTokenExchange, key, exchange.Options{})
	tok, err := s.Token(t.Context(), "corp", exchange.Request{Subject: "alice", SubjectToken: "alice-jwt", Audience: "inventory", Scopes: []string{"items:read", "items:list"}})
	if err != nil {
		t.Fatal(err)
	}
	if tok.Value != "issued-1" || !slices.Equal(tok.Scopes, []string{"items:list", "items:read"}) || tok.Expiry.IsZero() {
		t.Fatalf("token %q scopes %v expiry %v", tok.Value, tok.Scopes, tok.Expiry)
	}
	wantForm(t, a.form(0), map[string]string{
		"grant_type": exchange.GrantTokenExchange, "requested_token_type": exchange.TokenTypeAccess,
		"subject_token": "alice-jwt", "subject_token_type": exchange.TokenTypeAccess,
		"audience": "inventory", "scope": "items:list items:read",
	})

	if _, err := s.Token(t.Context(), "corp", exchange.Request{Subject: "alice", Delegate: "orchestrator", DelegateToken: "orch-jwt", Audience: "inventory", Scopes: []string{"items:read"}}); err != nil {
		t.Fatal(err)
	}
	f := a.form(1)
	wantForm(t, f, map[string]string{
		"grant_type": exchange.GrantTokenExchange, "requested_token_type": exchange.TokenTypeAccess,
		"subject_token": f.Get("subject_token"), "subject_token_type": exchange.TokenTypeJWT,
		"actor_token": "orch-jwt", "actor_token_type": exchange.TokenTypeAccess,
		"audience": "inventory", "scope": "items:read",
	})
	c := assertionClaims(t, f.Get("subject_token"), pub)
	act, _ := json.Marshal(c["act"])
	if c["iss"] != "toolfleet" || c["sub"] != "alice" || c["jti"] == nil || c["iat"] == nil || c["exp"] == nil ||
		string(act) != `{"act":{"sub":"orchestrator"},"sub":"toolfleet"}` {
		t.Fatalf("subject token claims %v", c)
	}
	if aud, _ := c.GetAudience(); !slices.Equal(aud, []string{a.srv.URL + "/token"}) {
		t.Fatalf("subject token aud %v", aud)
	}

	// Without an assertion key a delegated call cannot be exchanged: said so, nothing sent.
	bare := newSet(t, a, connections.ExchangeTokenExchange, "", exchange.Options{})
	before := a.requests()
	_, err = bare.Token(t.Context(), "corp", exchange.Request{Subject: "alice", Delegate: "orchestrator", DelegateToken: "orch-jwt", Audience: "inventory"})
	if !errors.Is(err, exchange.ErrUnsupported) || a.requests() != before {
		t.Fatalf("delegated call without a key: %v (%d requests)", err, a.requests()-before)
	}
}

// The RFC 7523 wire form: an assertion for the principal, aud the token
// endpoint and the tool's audience, the act chain.
func TestJWTBearerWire(t *testing.T) {
	t.Parallel()
	a := newAS(t)
	key, pub := keyFile(t)
	s := newSet(t, a, connections.ExchangeJWTBearer, key, exchange.Options{})
	for i, tc := range []struct {
		req exchange.Request
		act string
	}{
		{exchange.Request{Subject: "alice", SubjectToken: "alice-jwt", Audience: "inventory", Scopes: []string{"items:read"}}, `{"sub":"toolfleet"}`},
		{exchange.Request{Subject: "alice", Delegate: "orchestrator", DelegateToken: "orch-jwt", Audience: "inventory", Scopes: []string{"items:read"}}, `{"act":{"sub":"orchestrator"},"sub":"toolfleet"}`},
	} {
		if _, err := s.Token(t.Context(), "corp", tc.req); err != nil {
			t.Fatal(err)
		}
		f := a.form(i)
		wantForm(t, f, map[string]string{"grant_type": exchange.GrantJWTBearer, "assertion": f.Get("assertion"), "audience": "inventory", "scope": "items:read"})
		if strings.Contains(f.Encode(), "alice-jwt") || strings.Contains(f.Encode(), "orch-jwt") {
			t.Fatalf("a jwt-bearer request carries a caller's token: %v", f)
		}
		c := assertionClaims(t, f.Get("assertion"), pub)
		act, _ := json.Marshal(c["act"])
		aud, _ := c.GetAudience()
		if c["iss"] != "toolfleet" || c["sub"] != "alice" || string(act) != tc.act || !slices.Equal(aud, []string{a.srv.URL + "/token", "inventory"}) {
			t.Fatalf("assertion claims %v", c)
		}
	}
}

// Tokens are cached per principal, delegate, audience and scopes, until
// shortly before they expire; the cache is bounded.
func TestCache(t *testing.T) {
	t.Parallel()
	a := newAS(t)
	key, _ := keyFile(t)
	clk := &clock{}
	s := newSet(t, a, connections.ExchangeJWTBearer, key, exchange.Options{Now: clk.now, CacheSize: 2})
	get := func(req exchange.Request) string {
		t.Helper()
		tok, err := s.Token(t.Context(), "corp", req)
		if err != nil {
			t.Fatal(err)
		}
		return tok.Value
	}
	alice := exchange.Request{Subject: "alice", Audience: "inventory", Scopes: []string{"b", "a"}}
	first := get(alice)
	if again := get(exchange.Request{Subject: "alice", Audience: "inventory", Scopes: []string{"a", "b", "a"}}); again != first {
		t.Fatalf("same principal, audience and scopes: %s then %s, want the cached token", first, again)
	}
	for _, other := range []exchange.Request{
		{Subject: "bob", Audience: "inventory", Scopes: []string{"a", "b"}},
		{Subject: "alice", Delegate: "orchestrator", Audience: "inventory", Scopes: []string{"a", "b"}},
		{Subject: "alice", Audience: "billing", Scopes: []string{"a", "b"}},
		{Subject: "alice", Audience: "inventory", Scopes: []string{"a"}},
	} {
		if got := get(other); got == first {
			t.Fatalf("%+v got alice's token", other)
		}
	}
	if n := a.requests(); n != 5 {
		t.Fatalf("%d exchanges, want 5", n)
	}
	// Bounded: alice's token was evicted by the later ones (size 2).
	if got := get(alice); got == first {
		t.Fatalf("the cache of 2 still holds the first of 5 tokens")
	}
	cached := get(alice)
	clk.advance(59 * time.Minute) // within the reuse margin of the expiry
	if got := get(alice); got == cached {
		t.Fatalf("a token a minute from expiry was reused")
	}

	// A token that lives less than the margin is never cached.
	a.mu.Lock()
	a.ttl = 30
	a.mu.Unlock()
	short := exchange.Request{Subject: "carol", Audience: "inventory"}
	if get(short) == get(short) {
		t.Fatalf("a 30 s token was cached")
	}
}

// Refusals and outages are told apart; neither error nor log carries a
// token or the server's text.
func TestErrors(t *testing.T) {
	t.Parallel()
	a := newAS(t)
	key, _ := keyFile(t)
	var logs bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logs.Write(p)
	}), nil))
	s := newSet(t, a, connections.ExchangeTokenExchange, key, exchange.Options{Logger: log})
	req := exchange.Request{Subject: "alice", SubjectToken: "alice-secret-token", Audience: "inventory"}
	for _, tc := range []struct {
		status int
		code   string
		want   error
	}{
		{http.StatusBadRequest, "invalid_grant", exchange.ErrRefused},
		{http.StatusBadRequest, "invalid_target", exchange.ErrRefused},
		{http.StatusBadRequest, "invalid_scope", exchange.ErrRefused},
		{http.StatusUnauthorized, "invalid_client", exchange.ErrUnavailable},
		{http.StatusServiceUnavailable, "temporarily_unavailable", exchange.ErrUnavailable},
		{http.StatusInternalServerError, "", exchange.ErrUnavailable},
	} {
		a.fail(tc.status, tc.code)
		_, err := s.Token(t.Context(), "corp", req)
		if !errors.Is(err, tc.want) {
			t.Errorf("%d %s: %v, want %v", tc.status, tc.code, err, tc.want)
		}
		if err != nil && (strings.Contains(err.Error(), "alice-secret-token") || strings.Contains(err.Error(), "bad subject_token")) {
			t.Errorf("the error quotes the request or the server: %v", err)
		}
	}
	a.srv.Close()
	if _, err := s.Token(t.Context(), "corp", req); !errors.Is(err, exchange.ErrUnavailable) {
		t.Errorf("server gone: %v", err)
	}
	mu.Lock()
	out := logs.String()
	mu.Unlock()
	if !strings.Contains(out, "invalid_grant") || strings.Contains(out, "alice-secret-token") || strings.Contains(out, "bad subject_token") {
		t.Fatalf("logs:\n%s", out)
	}
	if _, err := s.Token(t.Context(), "nope", req); !errors.Is(err, exchange.ErrUnknownProvider) {
		t.Fatalf("unknown provider: %v", err)
	}
	if _, err := s.Token(t.Context(), "corp", exchange.Request{Audience: "inventory"}); !errors.Is(err, exchange.ErrUnsupported) {
		t.Fatalf("no subject: %v", err)
	}
	if _, err := s.Token(t.Context(), "corp", exchange.Request{Subject: "alice", SubjectToken: "x"}); !errors.Is(err, exchange.ErrUnsupported) {
		t.Fatalf("no audience: %v", err)
	}
	tok := exchange.Token{Value: "the-secret", Type: "Bearer"}
	if s := fmt.Sprintf("%v %+v %#v %s", tok, tok, tok, tok); strings.Contains(s, "the-secret") {
		t.Fatalf("a token prints its value: %s", s)
	}
}

// Configuration mistakes are refused when the gateway starts.
func TestConfig(t *testing.T) {
	t.Parallel()
	a := newAS(t)
	key, _ := keyFile(t)
	for name, p := range map[string]connections.Provider{
		"jwt-bearer without a key": {Name: "corp", TokenURL: a.srv.URL, ClientID: "c", Exchange: connections.ExchangeJWTBearer},
		"unknown mode":             {Name: "corp", TokenURL: a.srv.URL, ClientID: "c", Exchange: "magic"},
		"not a key":                {Name: "corp", TokenURL: a.srv.URL, ClientID: "c", Exchange: connections.ExchangeJWTBearer, AssertionKeyFile: secretFile(t)},
		"no token url":             {Name: "corp", ClientID: "c", Exchange: connections.ExchangeTokenExchange, AssertionKeyFile: key},
		"plain http elsewhere":     {Name: "corp", TokenURL: "http://as.example/token", ClientID: "c", Exchange: connections.ExchangeTokenExchange},
		"a connect provider":       {Name: "corp", TokenURL: a.srv.URL, AuthorizationURL: a.srv.URL, ClientID: "c"},
	} {
		if _, err := exchange.New(t.Context(), []connections.Provider{p}, exchange.Options{}); !errors.Is(err, connections.ErrConfig) {
			t.Errorf("%s: %v, want a configuration error", name, err)
		}
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// Callers that miss the cache together share one exchange; one of them
// going away stops only its own wait.
func TestConcurrentMissesShareOneExchange(t *testing.T) {
	t.Parallel()
	arrived, release := make(chan struct{}, 16), make(chan struct{})
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		arrived <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"access_token": "shared", "token_type": "Bearer", "expires_in": 3600}`))
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	key, _ := keyFile(t)
	s, err := exchange.New(t.Context(), []connections.Provider{{Name: "corp", TokenURL: srv.URL, ClientID: "toolfleet",
		Exchange: connections.ExchangeJWTBearer, AssertionKeyFile: key}}, exchange.Options{})
	if err != nil {
		t.Fatal(err)
	}
	req := exchange.Request{Subject: "alice", Audience: "inventory", Scopes: []string{"items:read"}}
	first, cancel := context.WithCancel(t.Context())
	firstDone := make(chan error, 1)
	go func() {
		_, err := s.Token(first, "corp", req)
		firstDone <- err
	}()
	select {
	case <-arrived:
	case <-time.After(30 * time.Second):
		t.Fatal("the exchange did not reach the server")
	}
	const others = 6
	results := make(chan string, others)
	for range others {
		go func() {
			tok, err := s.Token(t.Context(), "corp", req)
			if err != nil {
				results <- err.Error()
				return
			}
			results <- tok.Value
		}()
	}
	cancel()
	select {
	case err := <-firstDone:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the caller that went away: %v, want context.Canceled", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the caller that went away is still waiting")
	}
	close(release)
	for range others {
		select {
		case got := <-results:
			if got != "shared" {
				t.Fatalf("a caller got %q, want the shared token", got)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a caller is still waiting")
		}
	}
	if n := requests.Load(); n != 1 {
		t.Fatalf("%d exchanges for one key, want 1", n)
	}
}

// The assertion key may be RSA (RS256) or EC P-256 (ES256), in the PEM forms
// openssl writes; short RSA keys and other curves are refused.
func TestAssertionKeys(t *testing.T) {
	t.Parallel()
	a := newAS(t)
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pkcs8 := func(k any) []byte {
		der, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	}
	sec1, _ := x509.MarshalECPrivateKey(ecKey)
	p384der, _ := x509.MarshalECPrivateKey(p384)
	for _, tc := range []struct {
		name string
		pem  []byte
		alg  string // "" = refused
	}{
		{"RSA PKCS #8", pkcs8(rsaKey), "RS256"},
		{"RSA PKCS #1", pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(rsaKey)}), "RS256"},
		{"EC PKCS #8", pkcs8(ecKey), "ES256"},
		{"EC SEC 1", pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: sec1}), "ES256"},
		{"EC P-384", pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: p384der}), ""},
	} {
		path := filepath.Join(t.TempDir(), "key.pem")
		if err := os.WriteFile(path, tc.pem, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := exchange.New(t.Context(), []connections.Provider{{Name: "corp", TokenURL: a.srv.URL, ClientID: "toolfleet",
			ClientSecretFile: secretFile(t), Exchange: connections.ExchangeJWTBearer, AssertionKeyFile: path}}, exchange.Options{})
		if tc.alg == "" {
			if !errors.Is(err, connections.ErrConfig) {
				t.Errorf("%s: %v, want refused", tc.name, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if _, err := s.Token(t.Context(), "corp", exchange.Request{Subject: tc.name, Audience: "inventory"}); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		tok, _, err := jwt.NewParser().ParseUnverified(a.form(a.requests()-1).Get("assertion"), jwt.MapClaims{})
		if err != nil {
			t.Fatalf("%s: assertion: %v", tc.name, err)
		}
		if tok.Method.Alg() != tc.alg {
			t.Errorf("%s: assertion alg %s, want %s", tc.name, tok.Method.Alg(), tc.alg)
		}
	}
}
