package delegation_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/golang-jwt/jwt/v5"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/gen/toolfleet/v1/toolfleetv1connect"
	"github.com/toolfleet/toolfleet/internal/natsx/natstest"
	"github.com/toolfleet/toolfleet/sdk/jsassets"
	"github.com/toolfleet/toolfleet/sdk/natsconn"
	"github.com/toolfleet/toolfleet/services/gateway"
	"github.com/toolfleet/toolfleet/services/gateway/connections"
	"github.com/toolfleet/toolfleet/services/gateway/delegation"
	"github.com/toolfleet/toolfleet/services/gateway/gatewaytest"
)

const secret = "delegation-wiring-test-secret-0123456789"

// writeFiles writes a connections file (one provider, never reached: the
// flow against a real server is e2e/oauth's) with its key ring and secret.
func writeFiles(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range map[string]string{
		"keys":   connections.NewKeyLine("k1") + "\n",
		"secret": "client-secret\n",
		"connections.json": `{"public_url": "http://127.0.0.1:8080", "key_ring_file": "keys",
  "providers": [{"name": "acme", "client_id": "toolfleet", "client_secret_file": "secret",
    "authorization_url": "https://acme.example/authorize", "token_url": "https://acme.example/token"}]}`,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "connections.json")
}

// The ConnectionService and the flow are served at the gateway's address,
// for the authenticated caller only.
func TestWiring(t *testing.T) {
	t.Parallel()
	nats := natstest.Start(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	w, err := delegation.Open(t.Context(), writeFiles(t), nats.URL(), natsconn.Options{}, jsassets.Config{Storage: jsassets.StorageMemory, Profile: jsassets.ProfileDev}, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	g, err := gateway.New(t.Context(), gateway.Config{Listen: "127.0.0.1:0", NATSURL: nats.URL(), Auth: gateway.AuthConfig{HS256Secret: []byte(secret)},
		Mounts: w.Mounts(), Connections: w.Tokens(), Logger: log, WarmUp: 50 * time.Millisecond,
		Assets: jsassets.Config{Storage: jsassets.StorageMemory, Profile: jsassets.ProfileDev}})
	if err != nil {
		t.Fatal(err)
	}
	w.Serving(g)
	gatewaytest.Run(t, g)
	base := "http://" + g.Addr()
	as := func(sub string) connect.ClientOption {
		tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": sub, "exp": time.Now().Add(time.Minute).Unix()}).SignedString([]byte(secret))
		if err != nil {
			t.Fatal(err)
		}
		return connect.WithInterceptors(connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
			return func(ctx context.Context, r connect.AnyRequest) (connect.AnyResponse, error) {
				r.Header().Set("Authorization", "Bearer "+tok)
				return next(ctx, r)
			}
		}))
	}
	alice := toolfleetv1connect.NewConnectionServiceClient(http.DefaultClient, base, as("alice"))
	list, err := alice.ListConnections(t.Context(), connect.NewRequest(&toolfleetv1.ListConnectionsRequest{}))
	if err != nil || len(list.Msg.GetConnections()) != 0 || strings.Join(list.Msg.GetProviders(), ",") != "acme" {
		t.Fatalf("list: %v, %v", list, err)
	}
	start, err := alice.StartConnection(t.Context(), connect.NewRequest(&toolfleetv1.StartConnectionRequest{Provider: "acme", Scopes: []string{"profile"}}))
	if err != nil || !strings.HasPrefix(start.Msg.GetAuthorizationUrl(), "http://127.0.0.1:8080/connections/start?state=") {
		t.Fatalf("start: %v, %v", start, err)
	}
	if _, err := alice.StartConnection(t.Context(), connect.NewRequest(&toolfleetv1.StartConnectionRequest{Provider: "nope"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("unknown provider: %v", err)
	}
	if r, err := alice.RevokeConnection(t.Context(), connect.NewRequest(&toolfleetv1.RevokeConnectionRequest{Provider: "acme"})); err != nil || r.Msg.GetRevoked() {
		t.Fatalf("revoke without a connection: %v, %v", r, err)
	}
	anonymous := toolfleetv1connect.NewConnectionServiceClient(http.DefaultClient, base)
	if _, err := anonymous.ListConnections(t.Context(), connect.NewRequest(&toolfleetv1.ListConnectionsRequest{})); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("without a token: %v", err)
	}
	// The start link, opened on the gateway's port as a browser would: a page
	// naming alice; its button (a same-origin POST) redirects to the provider
	// with PKCE; a cross-site page cannot press it. No bearer token needed.
	link := strings.Replace(start.Msg.GetAuthorizationUrl(), "http://127.0.0.1:8080", base, 1)
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }, Timeout: 10 * time.Second}
	send := func(method, target, body, site string) *http.Response {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), method, target, strings.NewReader(body))
		if body != "" {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		req.Header.Set("Sec-Fetch-Site", site)
		resp, err := noFollow.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp
	}
	if resp := send(http.MethodGet, link, "", "cross-site"); resp.StatusCode != http.StatusOK {
		t.Fatalf("the link's page: %d", resp.StatusCode)
	}
	form := "state=" + strings.SplitN(link, "state=", 2)[1]
	if resp := send(http.MethodPost, base+connections.StartPath, form, "cross-site"); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a cross-site POST of the button: %d, want 403", resp.StatusCode)
	}
	resp := send(http.MethodPost, base+connections.StartPath, form, "same-origin")
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusFound || !strings.HasPrefix(loc, "https://acme.example/authorize?") || !strings.Contains(loc, "code_challenge_method=S256") {
		t.Fatalf("the button through the gateway: %d %s", resp.StatusCode, loc)
	}
}

// TestExchangeProviders: providers with an exchange mode become the
// gateway's Exchange, not providers to connect to; a file of them alone needs
// no key ring and starts no connections; a mixed file gives both; mistakes
// in them stop the start.
func TestExchangeProviders(t *testing.T) {
	t.Parallel()
	nats := natstest.Start(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	assets := jsassets.Config{Storage: jsassets.StorageMemory, Profile: jsassets.ProfileDev}
	write := func(body string) string {
		dir := t.TempDir()
		for name, b := range map[string]string{"connections.json": body, "secret": "s3cret", "keys": connections.NewKeyLine("k1") + "\n"} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(b), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return filepath.Join(dir, "connections.json")
	}
	const corp = `{"name": "corp", "token_url": "https://login.example.com/token", "client_id": "gw", "client_secret_file": "secret", "exchange": "token-exchange"}`
	// Exchange providers keep nothing: no NATS needed.
	only, err := delegation.Open(t.Context(), write(`{"providers": [`+corp+`]}`), "", natsconn.Options{}, assets, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(only.Close)
	if x := only.Exchange(); x == nil || !x.Provides("corp") || x.Provides("acme") || only.Tokens() != nil || only.Mounts() != nil {
		t.Fatalf("exchange-only file: exchange %v, tokens %v, mounts %d", only.Exchange(), only.Tokens(), len(only.Mounts()))
	}
	mixed, err := delegation.Open(t.Context(), write(`{"public_url": "http://127.0.0.1:8080", "key_ring_file": "keys", "providers": [`+corp+`,
  {"name": "acme", "client_id": "toolfleet", "client_secret_file": "secret", "authorization_url": "https://acme.example/authorize", "token_url": "https://acme.example/token"}]}`),
		nats.URL(), natsconn.Options{}, assets, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mixed.Close)
	if _, err := delegation.Open(t.Context(), write(`{"public_url": "http://127.0.0.1:8080", "key_ring_file": "keys", "providers": [`+corp+`,
  {"name": "acme", "client_id": "toolfleet", "client_secret_file": "secret", "authorization_url": "https://acme.example/authorize", "token_url": "https://acme.example/token"}]}`),
		"", natsconn.Options{}, assets, log); err == nil || !strings.Contains(err.Error(), "need --nats-url") {
		t.Fatalf("connections without NATS: %v, want a refusal naming --nats-url", err)
	}
	if mixed.Exchange() == nil || !mixed.Exchange().Provides("corp") || mixed.Tokens() == nil || len(mixed.Mounts()) != 2 {
		t.Fatal("mixed file: want an exchanger and connections")
	}
	for name, body := range map[string]string{
		"jwt-bearer without a key": `{"providers": [{"name": "corp", "token_url": "https://login.example.com/token", "client_id": "gw", "exchange": "jwt-bearer"}]}`,
		"unknown mode":             `{"providers": [{"name": "corp", "token_url": "https://login.example.com/token", "client_id": "gw", "exchange": "saml"}]}`,
		"connections, no key ring": `{"providers": [{"name": "acme", "client_id": "x", "authorization_url": "https://a.example/a", "token_url": "https://a.example/t"}]}`,
	} {
		if _, err := delegation.Open(t.Context(), write(body), nats.URL(), natsconn.Options{}, assets, log); !errors.Is(err, connections.ErrConfig) {
			t.Errorf("%s: %v, want a configuration error", name, err)
		}
	}
}
