package main

import (
	"bytes"
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

// TestDevTokenCommand: `toolfleet dev token` mints what the gateway accepts
// for the subject and scopes asked, and without a secret says what to pass.
func TestDevTokenCommand(t *testing.T) {
	t.Parallel()
	secret := strings.Repeat("s", 40)
	a, err := auth.New(t.Context(), slog.New(slog.NewTextHandler(io.Discard, nil)), auth.Config{HS256Secret: []byte(secret)})
	if err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (stdout, stderr string, err error) {
		var out, errOut bytes.Buffer
		root := newRootCommand()
		root.SetArgs(args)
		root.SetOut(&out)
		root.SetErr(&errOut)
		err = root.ExecuteContext(t.Context())
		return out.String(), errOut.String(), err
	}
	tests := []struct {
		name    string
		args    []string
		sub     string
		scopes  []string
		wantErr string
	}{
		{"asked scopes", []string{"--sub", "alice", "--scopes", "tools:call tools:approve"}, "alice", []string{"tools:call", "tools:approve"}, ""},
		{"commas", []string{"--sub", "bob", "--scopes", "runs:read,runs:start"}, "bob", []string{"runs:read", "runs:start"}, ""},
		{"defaults", nil, "dev", devUserScopes, ""},
		{"no scopes", []string{"--scopes", " "}, "", nil, "--scopes is empty: give at least one"},
		{"no subject", []string{"--sub", ""}, "", nil, "--sub is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out, errOut, err := run(append([]string{"dev", "token", "--gateway-jwt-secret", secret}, tt.args...)...)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			p, ce := a.Authenticate(t.Context(), "Bearer "+strings.TrimSpace(out))
			if ce != nil {
				t.Fatalf("the gateway refused the token: %v\n%s", ce.Message, out)
			}
			if p.Subject != tt.sub || !slices.Equal(p.Scopes, tt.scopes) {
				t.Fatalf("principal %s %v, want %s %v", p.Subject, p.Scopes, tt.sub, tt.scopes)
			}
			if !strings.Contains(errOut, "--token or $TOOLFLEET_TOKEN") {
				t.Errorf("stderr does not say how to use the token:\n%s", errOut)
			}
		})
	}
	t.Run("no secret", func(t *testing.T) {
		t.Parallel()
		_, _, err := run("dev", "token", "--gateway-jwt-secret=", "--sub", "alice")
		if err == nil || !strings.Contains(err.Error(), "pass --gateway-jwt-secret S or set $TOOLFLEET_GATEWAY_JWT_SECRET") {
			t.Fatalf("error %v, want what to pass", err)
		}
	})
}
