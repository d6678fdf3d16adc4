package devlogin

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/oauth2/clientcredentials"

	"github.com/toolfleet/toolfleet/e2e/oauth/hydratest"
	"github.com/toolfleet/toolfleet/internal/hydralogin"
)

// TestEnsureClientIsIdempotent: `toolfleet dev hydra-login --clients`
// registers a client under its fixed id on a real Hydra; registering it
// again succeeds and changes nothing, and a changed secret replaces the old
// one (the client's id stays, so the gateway's configuration stays valid).
func TestEnsureClientIsIdempotent(t *testing.T) {
	t.Parallel()
	hy := hydratest.Start(t, hydratest.Options{})
	admin, err := hydralogin.NewAdmin(hy.AdminURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	const id = "toolfleet-acme-test"
	spec := func(secret string) hydralogin.ClientSpec {
		t.Helper()
		b, err := json.Marshal([]map[string]any{{
			"client_id": id, "client_secret": secret, "grant_types": []string{"client_credentials"},
			"scope": "tickets:read", "token_endpoint_auth_method": "client_secret_basic",
		}})
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "clients.json")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		cs, err := hydralogin.ReadClients(path)
		if err != nil || len(cs) != 1 || cs[0].ID != id {
			t.Fatalf("ReadClients = %v, %v", cs, err)
		}
		return cs[0]
	}
	tokenWith := func(ctx context.Context, secret string) error {
		cfg := clientcredentials.Config{ClientID: id, ClientSecret: secret, TokenURL: hy.TokenURL(), Scopes: []string{"tickets:read"}}
		_, err := cfg.Token(ctx)
		return err
	}
	ctx := t.Context()
	for i := range 2 {
		if err := admin.EnsureClient(ctx, spec("first-secret-0123456789")); err != nil {
			t.Fatalf("registration %d: %v", i+1, err)
		}
		if err := tokenWith(ctx, "first-secret-0123456789"); err != nil {
			t.Fatalf("after registration %d: the client's secret gets no token: %v", i+1, err)
		}
	}
	if err := admin.EnsureClient(ctx, spec("second-secret-0123456789")); err != nil {
		t.Fatal(err)
	}
	if err := tokenWith(ctx, "second-secret-0123456789"); err != nil {
		t.Fatalf("the new secret gets no token: %v", err)
	}
	if err := tokenWith(ctx, "first-secret-0123456789"); err == nil {
		t.Fatal("the replaced secret still gets a token")
	}
}
