package tokenexchange_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	gooidc "github.com/coreos/go-oidc/v3/oidc"
	"github.com/zitadel/oidc/v3/example/server/storage"
	"golang.org/x/oauth2/clientcredentials"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	delegatedv1 "github.com/toolfleet/toolfleet/gen/tools/delegated/v1"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/sdk/tool/tooltest"
	"github.com/toolfleet/toolfleet/services/gateway"
	"github.com/toolfleet/toolfleet/services/gateway/auth"
	"github.com/toolfleet/toolfleet/services/gateway/connections"
	"github.com/toolfleet/toolfleet/services/gateway/exchange"
	"github.com/toolfleet/toolfleet/services/gateway/gatewaytest"
)

// tokenKeeper serves Delegated.Inventory: it keeps the corp token the gateway
// gave each call and answers without calling anything.
type tokenKeeper struct {
	delegatedv1.UnimplementedDelegatedServiceServer
	mu     sync.Mutex
	tokens []string
}

func (k *tokenKeeper) Inventory(ctx context.Context, _ *delegatedv1.InventoryRequest) (*delegatedv1.InventoryResponse, error) {
	tok, err := tool.Credential(ctx, "corp")
	if err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	k.mu.Lock()
	k.tokens = append(k.tokens, tok)
	k.mu.Unlock()
	return &delegatedv1.InventoryResponse{Status: 200}, nil
}

func (k *tokenKeeper) all() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.tokens)
}

// writeAssertionKey writes a P-256 key (PKCS #8 PEM) to dir/name and
// returns the file and the public key.
func writeAssertionKey(t *testing.T, dir, name string) (string, *ecdsa.PublicKey) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, &k.PublicKey
}

// startExchangingGateway runs a gateway that authenticates callers with
// the OP's JWKS (iss and aud checked) and exchanges corp tokens at the OP
// by RFC 8693, signing subject tokens with keyFile.
func startExchangingGateway(t *testing.T, issuer, jwksURL, secretFile, keyFile, worker string) toolfleetv1.ToolGatewayServiceClient {
	t.Helper()
	ctx := t.Context()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	set, err := exchange.New(ctx, []connections.Provider{{Name: "corp", Issuer: issuer, ClientID: clientID, ClientSecretFile: secretFile,
		Exchange: connections.ExchangeTokenExchange, AssertionKeyFile: keyFile, AssertionKeyID: "gw-1"}}, exchange.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	g, err := gateway.New(ctx, gateway.Config{Listen: "127.0.0.1:0", Workers: []string{worker}, Exchange: set, WarmUp: 50 * time.Millisecond,
		Auth: gateway.AuthConfig{JWKSURL: jwksURL, Issuer: issuer, Audience: clientID}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	gatewaytest.Run(t, g)
	gatewaytest.WaitTool(t, g, "Delegated.Inventory")
	conn, err := grpc.NewClient(g.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return toolfleetv1.NewToolGatewayServiceClient(conn)
}

// serviceToken signs a service client in with the client credentials grant.
func serviceToken(t *testing.T, issuer, id, secret string, scopes ...string) string {
	t.Helper()
	cfg := clientcredentials.Config{ClientID: id, ClientSecret: secret, Scopes: scopes,
		TokenURL: strings.TrimSuffix(issuer, "/") + "/oauth/token"}
	tok, err := cfg.Token(t.Context())
	if err != nil {
		t.Fatalf("%s signs in: %v", id, err)
	}
	return tok.AccessToken
}

// TestDelegatedExchangeAtARealServer: an agent run's call (a delegate
// holding tools:delegate, on behalf of alice) goes through the gateway to
// zitadel's OP by RFC 8693 in the delegated form: subject_token = a JWT the
// gateway signs for alice with its assertion key (which the IdP trusts),
// actor_token = the delegate's own bearer token, which the OP issued (client
// credentials) and the gateway verified by the OP's JWKS. The worker gets a
// token the OP issued for alice, bound to the inventory audience, whose act
// names the delegate. Alice is no admin of the example storage, whose rule
// (no impersonation without permission) passes because there is an actor.
// Refused: an actor other than the delegate the subject JWT names (the
// IdP's policy); a gateway signing with a key the IdP does not trust
// (PERMISSION_DENIED); a caller without tools:delegate naming alice, before
// any exchange.
func TestDelegatedExchangeAtARealServer(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	keyFile, pub := writeAssertionKey(t, dir, "assertion.pem")
	forgedKeyFile, _ := writeAssertionKey(t, dir, "forged.pem")
	secretFile := filepath.Join(dir, "secret")
	if err := os.WriteFile(secretFile, []byte(clientSecret), 0o600); err != nil {
		t.Fatal(err)
	}
	storage.RegisterClients(storage.WebClient(clientID, clientSecret, redirectURI),
		storage.WebClient("inventory", "inventory-secret"), storage.WebClient("billing", "billing-secret"))
	idp := &delegatingIdP{gatewayID: clientID, gatewayKey: pub, apiAud: clientID, services: map[string]serviceClient{
		"orchestrator": {secret: "orchestrator-secret", scopes: []string{"tools:delegate"}},
		"reporter":     {secret: "reporter-secret", scopes: []string{"tools:call"}},
	}}
	issuer := startDelegatingOP(t, idp, "alice")
	provider, err := gooidc.NewProvider(ctx, issuer)
	if err != nil {
		t.Fatal(err)
	}
	var disc struct {
		JWKS string `json:"jwks_uri"`
	}
	if err := provider.Claims(&disc); err != nil || disc.JWKS == "" {
		t.Fatalf("discovery: jwks_uri %q (%v)", disc.JWKS, err)
	}

	keeper := &tokenKeeper{}
	wk, stop := tooltest.Start(t, tool.Config{Name: "delegated", ShutdownTimeout: 2 * time.Second},
		func(w *tool.Worker) { delegatedv1.RegisterDelegatedServiceServer(w, keeper) })
	t.Cleanup(func() { _ = stop() })
	gc := startExchangingGateway(t, issuer, disc.JWKS, secretFile, keyFile, wk.Addr())

	call := func(c toolfleetv1.ToolGatewayServiceClient, md ...string) error {
		in, _ := structpb.NewStruct(map[string]any{"api": "inventory"})
		resp, err := c.CallTool(metadata.AppendToOutgoingContext(ctx, md...), &toolfleetv1.CallToolRequest{ToolId: "Delegated.Inventory", Input: in})
		if err == nil && !resp.GetSuccess() {
			t.Fatalf("Inventory: %v", resp.GetError())
		}
		return err
	}
	orchestrator := serviceToken(t, issuer, "orchestrator", "orchestrator-secret", "tools:delegate")
	forAlice := []string{"authorization", "Bearer " + orchestrator, auth.HeaderOnBehalfOf, "alice", auth.HeaderOnBehalfScopes, "tools:call"}

	// The run's call for alice: the OP verified the gateway's subject JWT and
	// its own actor token, and issued a token for alice acting through the
	// orchestrator.
	if err := call(gc, forAlice...); err != nil {
		t.Fatalf("the run's call for alice: %v", err)
	}
	tokens := keeper.all()
	if len(tokens) != 1 || tokens[0] == orchestrator {
		t.Fatalf("the worker got %d tokens (the orchestrator's own: %v)", len(tokens), len(tokens) > 0 && tokens[0] == orchestrator)
	}
	tok := tokens[0]
	payload, err := provider.VerifierContext(ctx, &gooidc.Config{SkipClientIDCheck: true}).Verify(ctx, tok)
	if err != nil {
		t.Fatalf("the issued token is not the OP's: %v", err)
	}
	var c struct {
		Act      map[string]any `json:"act"`
		ClientID string         `json:"client_id"`
		Scope    string         `json:"scope"`
	}
	if err := payload.Claims(&c); err != nil {
		t.Fatal(err)
	}
	if payload.Subject != "alice" || !slices.Equal(payload.Audience, []string{"inventory"}) || c.ClientID != clientID ||
		c.Scope != "items:read" || asJSON(c.Act) != `{"sub":"orchestrator"}` {
		t.Fatalf("the issued token: sub %q aud %v client %q scope %q act %s; want alice, [inventory], %s, items:read, act orchestrator",
			payload.Subject, payload.Audience, c.ClientID, c.Scope, asJSON(c.Act), clientID)
	}
	if in := introspect(t, issuer, "inventory", tok); in["active"] != true || in["sub"] != "alice" || in["scope"] != "items:read" {
		t.Fatalf("introspected by the inventory API: %v", in)
	}
	if in := introspect(t, issuer, "billing", tok); in["active"] != false {
		t.Fatalf("introspected by the billing API: %v", in)
	}

	// The IdP's policy: the actor must be the delegate the subject JWT
	// names; the gateway's exchange client with another actor's token
	// (which the gateway itself never sends) is refused.
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	set, err := exchange.New(ctx, []connections.Provider{{Name: "corp", Issuer: issuer, ClientID: clientID, ClientSecretFile: secretFile,
		Exchange: connections.ExchangeTokenExchange, AssertionKeyFile: keyFile}}, exchange.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	reporter := serviceToken(t, issuer, "reporter", "reporter-secret", "tools:call")
	_, err = set.Token(ctx, "corp", exchange.Request{Subject: "alice", Delegate: "orchestrator", DelegateToken: reporter,
		Audience: "inventory", Scopes: []string{"items:read"}})
	if !errors.Is(err, exchange.ErrRefused) {
		t.Fatalf("a subject JWT naming the orchestrator with the reporter's actor token: %v, want a refusal", err)
	}

	// A gateway whose assertion key the IdP does not trust (same client
	// credentials): the OP refuses its subject token, the tool does not run.
	forgedGC := startExchangingGateway(t, issuer, disc.JWKS, secretFile, forgedKeyFile, wk.Addr())
	before := idp.subjects.Load()
	if err := call(forgedGC, forAlice...); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a subject token signed with an untrusted key: %v, want PERMISSION_DENIED", err)
	}
	if idp.subjects.Load() == before || len(keeper.all()) != 1 {
		t.Fatalf("the forged subject token: %d verifications at the OP, %d worker calls", idp.subjects.Load()-before, len(keeper.all())-1)
	}

	// A caller without tools:delegate naming alice: refused by the gateway,
	// nothing presented to the OP.
	before = idp.subjects.Load()
	notDelegate := []string{"authorization", "Bearer " + reporter, auth.HeaderOnBehalfOf, "alice", auth.HeaderOnBehalfScopes, "tools:call"}
	if err := call(gc, notDelegate...); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a caller without tools:delegate acting for alice: %v, want PERMISSION_DENIED", err)
	}
	if idp.subjects.Load() != before || len(keeper.all()) != 1 {
		t.Fatalf("the refused delegation: %d exchanges at the OP, %d worker calls", idp.subjects.Load()-before, len(keeper.all())-1)
	}
}

func asJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
