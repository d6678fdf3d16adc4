package gateway_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"log/slog"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/grpc/codes"

	"github.com/toolfleet/toolfleet/internal/syncbuf"
	"github.com/toolfleet/toolfleet/services/gateway"
)

// TestAuthMatrix: every way a token can be wrong maps to the right code, on
// every protocol; toolkit patterns and the contract's own scopes are enforced.
func TestAuthMatrix(t *testing.T) {
	t.Parallel()
	_, calc, _ := calculatorWorker(t, "")
	g := startGateway(t, gateway.Config{Workers: []string{calc, schemaTestWorker(t, "")}, Auth: gateway.AuthConfig{
		HS256Secret: []byte(testSecret), Audience: "toolfleet"}})
	waitTool(t, g, "Calculator.Add")
	waitTool(t, g, "SchemaTest.Types")
	exp := func(d time.Duration) int64 { return time.Now().Add(d).Unix() }
	forged, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"aud": "toolfleet", "scope": "tools:call", "exp": exp(10 * time.Minute)}).
		SignedString([]byte("another-secret-another-secret-another"))
	if err != nil {
		t.Fatal(err)
	}
	none, err := jwt.NewWithClaims(jwt.SigningMethodNone, jwt.MapClaims{"aud": "toolfleet", "scope": "tools:call", "exp": exp(10 * time.Minute)}).
		SignedString(jwt.UnsafeAllowNoneSignatureType)
	if err != nil {
		t.Fatal(err)
	}
	rows := []struct {
		name   string
		tool   string
		bearer string
		code   codes.Code
	}{
		{"no token", "Calculator.Add", "", codes.Unauthenticated},
		{"garbage", "Calculator.Add", "not-a-jwt", codes.Unauthenticated},
		{"expired", "Calculator.Add", signHS(t, jwt.MapClaims{"aud": "toolfleet", "scope": "tools:call", "exp": exp(-time.Hour)}), codes.Unauthenticated},
		{"no exp", "Calculator.Add", signHS(t, jwt.MapClaims{"aud": "toolfleet", "scope": "tools:call"}), codes.Unauthenticated},
		{"forged", "Calculator.Add", forged, codes.Unauthenticated},
		{"alg none", "Calculator.Add", none, codes.Unauthenticated},
		{"wrong audience", "Calculator.Add", signHS(t, jwt.MapClaims{"aud": "other", "scope": "tools:call", "exp": exp(10 * time.Minute)}), codes.Unauthenticated},
		{"no call scope", "Calculator.Add", signHS(t, jwt.MapClaims{"aud": "toolfleet", "scope": "profile", "exp": exp(10 * time.Minute)}), codes.PermissionDenied},
		{"toolkit pattern", "Calculator.Add", signHS(t, jwt.MapClaims{"aud": "toolfleet", "scope": "tools:call:calculator.*", "exp": exp(10 * time.Minute)}), codes.OK},
		{"other toolkit's pattern", "Calculator.Add", signHS(t, jwt.MapClaims{"aud": "toolfleet", "scope": "tools:call:schematest.*", "exp": exp(10 * time.Minute)}), codes.PermissionDenied},
		{"tool pattern as scp list", "Calculator.Add", signHS(t, jwt.MapClaims{"aud": "toolfleet", "scp": []string{"tools:call:calculator.add"}, "exp": exp(10 * time.Minute)}), codes.OK},
		{"no subject", "Calculator.Add", signHS(t, jwt.MapClaims{"sub": "", "aud": "toolfleet", "scope": "tools:call", "exp": exp(10 * time.Minute)}), codes.Unauthenticated},
		{"missing contract scope", "SchemaTest.Types", signHS(t, jwt.MapClaims{"aud": "toolfleet", "scope": "tools:call", "exp": exp(10 * time.Minute)}), codes.PermissionDenied},
		{"contract scope", "SchemaTest.Types", signHS(t, jwt.MapClaims{"aud": "toolfleet", "scope": "tools:call schematest:read tools:approve", "exp": exp(10 * time.Minute)}), codes.OK},
	}
	for _, p := range protocols {
		for _, r := range rows {
			t.Run(p.name+"/"+r.name, func(t *testing.T) {
				t.Parallel()
				input := map[string]any{"a": 1, "b": 2}
				if r.tool == "SchemaTest.Types" {
					input = map[string]any{"s": "hi"}
				}
				got := p.call(t, g.Addr(), r.tool, input, r.bearer)
				wantHTTP := map[codes.Code]int{codes.OK: 200, codes.Unauthenticated: 401, codes.PermissionDenied: 403}[r.code]
				switch {
				case p.name == "oxp-http" && got.http != wantHTTP:
					t.Fatalf("HTTP %d (%+v), want %d", got.http, got, wantHTTP)
				case p.name != "oxp-http" && got.code != r.code:
					t.Fatalf("code %v (%+v), want %v", got.code, got, r.code)
				case r.code == codes.OK && got.kind != "success":
					t.Fatalf("got %+v, want success", got)
				}
			})
		}
	}
}

// TestAuthJWKS: RS256 and ES256 tokens verify against a JWKS file or URL; a token
// signed by an unknown key does not.
func TestAuthJWKS(t *testing.T) {
	t.Parallel()
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	b64 := func(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }
	set, _ := json.Marshal(map[string]any{"keys": []map[string]any{
		{"kty": "RSA", "kid": "r1", "n": b64(rsaKey.N.Bytes()), "e": b64(big.NewInt(int64(rsaKey.E)).Bytes())},
		{"kty": "EC", "kid": "e1", "crv": "P-256", "x": b64(ecKey.X.FillBytes(make([]byte, 32))), "y": b64(ecKey.Y.FillBytes(make([]byte, 32)))},
	}})
	file := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(file, set, 0o600); err != nil {
		t.Fatal(err)
	}
	jwksServer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(set)
	}))
	t.Cleanup(jwksServer.Close)
	_, calc, _ := calculatorWorker(t, "")
	fromFile := startGateway(t, gateway.Config{Workers: []string{calc}, Auth: gateway.AuthConfig{JWKSFile: file}})
	fromURL := startGateway(t, gateway.Config{Workers: []string{calc}, Auth: gateway.AuthConfig{JWKSURL: jwksServer.URL}})
	waitTool(t, fromFile, "Calculator.Add")
	waitTool(t, fromURL, "Calculator.Add")
	sign := func(m jwt.SigningMethod, kid string, key any) string {
		tok := jwt.NewWithClaims(m, jwt.MapClaims{"sub": "tester", "scope": "tools:call", "exp": time.Now().Add(time.Minute).Unix()})
		tok.Header["kid"] = kid
		s, err := tok.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	other, _ := rsa.GenerateKey(rand.Reader, 2048)
	for _, r := range []struct {
		name, bearer string
		code         codes.Code
	}{
		{"RS256", sign(jwt.SigningMethodRS256, "r1", rsaKey), codes.OK},
		{"ES256", sign(jwt.SigningMethodES256, "e1", ecKey), codes.OK},
		{"RS256 unknown key", sign(jwt.SigningMethodRS256, "r1", other), codes.Unauthenticated},
		{"unknown kid", sign(jwt.SigningMethodRS256, "r9", rsaKey), codes.Unauthenticated},
		{"HS256 refused", token(t, "tools:call"), codes.Unauthenticated},
	} {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			for _, g := range []*gateway.Gateway{fromFile, fromURL} {
				got := callGRPC(t, g.Addr(), "Calculator.Add", map[string]any{"a": 1, "b": 2}, r.bearer)
				if got.code != r.code {
					t.Fatalf("code %v (%+v), want %v", got.code, got, r.code)
				}
			}
		})
	}
}

// TestAuthOffOnlyOnLoopback: disabling auth is refused on a public listener.
func TestAuthOffOnlyOnLoopback(t *testing.T) {
	t.Parallel()
	for _, r := range []struct {
		listen string
		err    error
	}{
		{"0.0.0.0:0", gateway.ErrAuthOffNotLoopback},
		{":8080", gateway.ErrAuthOffNotLoopback},
		{"127.0.0.1:0", nil},
		{"[::1]:0", nil},
		{"localhost:0", nil},
	} {
		_, err := gateway.New(t.Context(), gateway.Config{Listen: r.listen, Auth: gateway.AuthConfig{Disabled: true}, Logger: quiet()})
		if !errors.Is(err, r.err) {
			t.Errorf("listen %s: err = %v, want %v", r.listen, err, r.err)
		}
	}
}

// TestAuthOffSaysSo: a gateway without auth says so when it starts.
func TestAuthOffSaysSo(t *testing.T) {
	t.Parallel()
	var buf syncbuf.Buffer
	startGateway(t, gateway.Config{Auth: gateway.AuthConfig{Disabled: true}, Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	if !strings.Contains(buf.String(), "AUTH IS OFF") {
		t.Fatalf("start logs:\n%s", buf.String())
	}
}
