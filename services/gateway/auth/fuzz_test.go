package auth

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// FuzzAuthenticate: whatever Authorization header arrives, the gateway either
// refuses it or returns the principal a key holder signed. A mutated token
// never yields another subject or more scopes.
func FuzzAuthenticate(f *testing.F) {
	secret := []byte("fuzz-secret-fuzz-secret-fuzz-secret!")
	a, err := New(context.Background(), slog.New(slog.NewTextHandler(io.Discard, nil)), Config{HS256Secret: secret})
	if err != nil {
		f.Fatal(err)
	}
	signed, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "fuzz", "scope": "tools:call",
		"exp": time.Now().Add(time.Hour).Unix()}).SignedString(secret)
	if err != nil {
		f.Fatal(err)
	}
	none, _ := jwt.NewWithClaims(jwt.SigningMethodNone, jwt.MapClaims{"sub": "admin", "scope": "tools:admin"}).SignedString(jwt.UnsafeAllowNoneSignatureType)
	for _, h := range []string{"Bearer " + signed, "Bearer " + none, "bearer " + signed, "Bearer ", "Basic Zm9vOmJhcg==", "Bearer a.b.c", ""} {
		f.Add(h)
	}
	f.Fuzz(func(t *testing.T, header string) {
		p, refusal := a.Authenticate(context.Background(), header)
		if refusal != nil {
			if p != nil || refusal.Message == "" {
				t.Fatalf("refusal %+v with principal %+v", refusal, p)
			}
			return
		}
		if p.Subject != "fuzz" || !slices.Equal(p.Scopes, []string{"tools:call"}) {
			t.Fatalf("header %q authenticated as %+v", header, p)
		}
	})
}
