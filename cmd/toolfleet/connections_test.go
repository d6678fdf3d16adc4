package main

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/toolfleet/toolfleet/internal/natsx/natstest"
	"github.com/toolfleet/toolfleet/sdk/jsassets"
	"github.com/toolfleet/toolfleet/sdk/natsconn"
	"github.com/toolfleet/toolfleet/services/gateway"
	"github.com/toolfleet/toolfleet/services/gateway/connections"
	"github.com/toolfleet/toolfleet/services/gateway/delegation"
	"github.com/toolfleet/toolfleet/services/gateway/gatewaytest"
)

// TestConnectionsCommands runs the connections verbs against a gateway with
// a connections file (its provider is never reached: the flow against a real
// authorization server is e2e/oauth's).
func TestConnectionsCommands(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for name, body := range map[string]string{
		"keys":   connections.NewKeyLine("k1") + "\n",
		"secret": "s\n",
		"connections.json": `{"public_url": "http://127.0.0.1:8080", "key_ring_file": "keys", "providers": [{"name": "acme",
  "client_id": "toolfleet", "client_secret_file": "secret", "authorization_url": "https://acme.example/authorize", "token_url": "https://acme.example/token"}]}`,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	nats := natstest.Start(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	assets := jsassets.Config{Storage: jsassets.StorageMemory, Profile: jsassets.ProfileDev}
	w, err := delegation.Open(t.Context(), filepath.Join(dir, "connections.json"), nats.URL(), natsconn.Options{}, assets, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	const secret = "connections-cli-test-secret-0123456789"
	g, err := gateway.New(t.Context(), gateway.Config{Listen: "127.0.0.1:0", NATSURL: nats.URL(), Auth: gateway.AuthConfig{HS256Secret: []byte(secret)},
		Mounts: w.Mounts(), Connections: w.Tokens(), Logger: log, WarmUp: 50 * time.Millisecond, Assets: assets})
	if err != nil {
		t.Fatal(err)
	}
	w.Serving(g)
	gatewaytest.Run(t, g)
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "alice", "exp": time.Now().Add(time.Minute).Unix()}).SignedString([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	gw := []string{"--gateway", g.Addr(), "--token", tok}
	out, code := runCLI(t, "", append([]string{"connections", "list", "-o", "json"}, gw...)...)
	if code != exitOK || !strings.Contains(out, `"providers"`) || !strings.Contains(out, `"acme"`) || strings.Contains(out, `"connections"`) {
		t.Fatalf("list -o json (%d):\n%s", code, out)
	}
	out, code = runCLI(t, "", append([]string{"connections", "list", "-o", "text"}, gw...)...)
	if code != exitOK || !strings.Contains(out, "No connections.") || !strings.Contains(out, "Providers: acme") {
		t.Fatalf("list -o text (%d):\n%s", code, out)
	}
	out, code = runCLI(t, "", append([]string{"connections", "connect", "acme", "--scope", "profile", "-o", "text"}, gw...)...)
	if code != exitOK || !strings.Contains(out, "http://127.0.0.1:8080/connections/start?state=") {
		t.Fatalf("connect (%d):\n%s", code, out)
	}
	out, code = runCLI(t, "", append([]string{"connections", "revoke", "acme", "-o", "text"}, gw...)...)
	if code != exitOK || !strings.Contains(out, "You had no acme connection.") {
		t.Fatalf("revoke (%d):\n%s", code, out)
	}
	if err := cliError(t, append([]string{"connections", "connect", "nope"}, gw...)...); err == nil || !strings.Contains(err.Error(), "unknown provider") {
		t.Fatalf("unknown provider: %v", err)
	}
	if err := cliError(t, "connections", "list", "--gateway", g.Addr()); err == nil || !strings.Contains(err.Error(), "did not accept your token") {
		t.Fatalf("without a token: %v", err)
	}
}

// cliError runs toolfleet with args and returns the error main would print.
func cliError(t *testing.T, args ...string) error {
	t.Helper()
	root := newRootCommand()
	root.SetOut(io.Discard)
	root.SetErr(io.Discard)
	root.SetArgs(args)
	return root.ExecuteContext(t.Context())
}
