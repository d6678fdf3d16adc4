package main

import (
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/toolfleet/toolfleet/services/gateway/auth"
)

// TestDevTokenSource: the token `toolfleet dev --gateway-jwt-secret` gives its
// orchestrator is accepted by the gateway's authenticator with that secret,
// names the orchestrator and holds the delegate's scopes, is reused, and is
// refused under another secret.
func TestDevTokenSource(t *testing.T) {
	t.Parallel()
	secret := strings.Repeat("k", 40)
	a, err := auth.New(t.Context(), slog.New(slog.NewTextHandler(io.Discard, nil)), auth.Config{HS256Secret: []byte(secret)})
	if err != nil {
		t.Fatal(err)
	}
	src := devTokenSource([]byte(secret))
	tok, err := src(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	p, ce := a.Authenticate(t.Context(), "Bearer "+tok)
	if ce != nil {
		t.Fatalf("the gateway refused the orchestrator's token: %v", ce.Message)
	}
	if p.Subject != devOrchestratorSubject || !slices.Equal(p.Scopes, devOrchestratorScopes) {
		t.Fatalf("principal %+v, want %s with %v", p, devOrchestratorSubject, devOrchestratorScopes)
	}
	if again, _ := src(t.Context()); again != tok {
		t.Error("a fresh token was minted while the first was far from expiring")
	}
	other, err := auth.New(t.Context(), slog.New(slog.NewTextHandler(io.Discard, nil)), auth.Config{HS256Secret: []byte(strings.Repeat("x", 40))})
	if err != nil {
		t.Fatal(err)
	}
	if _, ce := other.Authenticate(t.Context(), "Bearer "+tok); ce == nil {
		t.Error("a gateway with another secret accepted the token")
	}
}
