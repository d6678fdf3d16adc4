package delegation_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	delegatedv1 "github.com/toolfleet/toolfleet/gen/tools/delegated/v1"
	"github.com/toolfleet/toolfleet/internal/natsx/natstest"
	"github.com/toolfleet/toolfleet/sdk/jsassets"
	"github.com/toolfleet/toolfleet/sdk/natsconn"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/sdk/tool/tooltest"
	"github.com/toolfleet/toolfleet/services/gateway"
	"github.com/toolfleet/toolfleet/services/gateway/delegation"
	"github.com/toolfleet/toolfleet/services/gateway/exchange"
	"github.com/toolfleet/toolfleet/services/gateway/gatewaytest"

	"github.com/toolfleet/toolfleet/e2e/oauth/hydratest"
)

// inventoryWorker serves Delegated.Inventory: it calls the API the request
// names with the token the gateway gave the call, and keeps every token.
type inventoryWorker struct {
	delegatedv1.UnimplementedDelegatedServiceServer
	apis   map[string]string
	mu     sync.Mutex
	tokens []string
}

func (w *inventoryWorker) Inventory(ctx context.Context, req *delegatedv1.InventoryRequest) (*delegatedv1.InventoryResponse, error) {
	tok, err := tool.Credential(ctx, "corp")
	if err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	w.mu.Lock()
	w.tokens = append(w.tokens, tok)
	w.mu.Unlock()
	u, ok := w.apis[req.GetApi()]
	if !ok {
		return nil, status.Error(codes.InvalidArgument, "no such API")
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodGet, u+"/items", nil)
	if err != nil {
		return nil, err
	}
	hreq.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(hreq)
	if err != nil {
		return nil, status.Error(codes.Unavailable, "API unreachable")
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	return &delegatedv1.InventoryResponse{Status: int32(resp.StatusCode), Body: string(body)}, nil
}

// last is the token of the worker's latest call.
func (w *inventoryWorker) last(t *testing.T) string {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.tokens) == 0 {
		t.Fatal("the worker received no token")
	}
	return w.tokens[len(w.tokens)-1]
}

func (w *inventoryWorker) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.tokens)
}

// assertionKey writes the gateway's assertion key (P-256, PKCS #8 PEM) and
// returns its file and public key.
func assertionKey(t *testing.T, dir string) (string, *ecdsa.PublicKey) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "assertion.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, &k.PublicKey
}

// publicJWK is pub as a JWK, the form Hydra's trust relationship takes.
func publicJWK(t *testing.T, pub *ecdsa.PublicKey, kid string) map[string]any {
	t.Helper()
	e, err := pub.ECDH()
	if err != nil {
		t.Fatal(err)
	}
	pt := e.Bytes() // 0x04 || X || Y
	b64 := base64.RawURLEncoding.EncodeToString
	return map[string]any{"kty": "EC", "crv": "P-256", "x": b64(pt[1:33]), "y": b64(pt[33:65]), "kid": kid, "alg": "ES256", "use": "sig"}
}

// callInventory calls Delegated.Inventory with md (authorization and
// delegation metadata) against api: the API's status and body, or the
// call's error.
func callInventory(t *testing.T, gc toolfleetv1.ToolGatewayServiceClient, api string, md ...string) (int32, string, error) {
	t.Helper()
	ctx := metadata.AppendToOutgoingContext(t.Context(), md...)
	in, _ := structpb.NewStruct(map[string]any{"api": api})
	resp, err := gc.CallTool(ctx, &toolfleetv1.CallToolRequest{ToolId: "Delegated.Inventory", Input: in})
	if err != nil {
		return 0, "", err
	}
	if !resp.GetSuccess() {
		t.Fatalf("Inventory: %v", resp.GetError())
	}
	f := resp.GetValue().GetStructValue().GetFields()
	return int32(f["status"].GetNumberValue()), f["body"].GetStringValue(), nil
}

func signed(t *testing.T, claims jwt.MapClaims) string {
	t.Helper()
	claims["exp"] = time.Now().Add(10 * time.Minute).Unix()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func asJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestExchangeForFirstPartyAPI: a tool of a first-party API (credential
// corp, audience inventory) receives a token Hydra issued for the calling
// person by the RFC 7523 jwt-bearer grant (the gateway's assertion, Hydra's
// trust relationship), bound to the inventory audience and the tool's
// scopes, with the act chain (the gateway; for an agent run, the gateway
// acting for the orchestrator) that Hydra's token hook copied from the
// assertion. The inventory API accepts it, the billing API refuses it; a
// second person gets their own; a plain caller cannot pass for a run; a
// refused exchange is PERMISSION_DENIED; no token reaches a log or an event.
func TestExchangeForFirstPartyAPI(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	_, pub := assertionKey(t, dir)
	var gatewayClient atomic.Pointer[string]
	var exchanges atomic.Int64
	hook := hydratest.ServeTokenHook(t, func(r hydratest.TokenRequest) map[string]any {
		if id := gatewayClient.Load(); id == nil || r.ClientID != *id || !slices.Contains(r.GrantTypes, exchange.GrantJWTBearer) {
			return nil
		}
		exchanges.Add(1)
		// Copy the chain from the assertion Hydra verified, checking its
		// signature again: the hook trusts nothing it did not verify.
		var a []string
		if a = r.Payload["assertion"]; len(a) != 1 {
			t.Errorf("token hook: payload %v has no assertion", r.Payload)
			return nil
		}
		var c struct {
			jwt.RegisteredClaims
			Act *exchange.Actor `json:"act"`
		}
		if _, err := jwt.ParseWithClaims(a[0], &c, func(*jwt.Token) (any, error) { return pub, nil }, jwt.WithValidMethods([]string{"ES256"})); err != nil || c.Act == nil {
			t.Errorf("token hook: assertion %v (act %v)", err, c.Act)
			return nil
		}
		return map[string]any{"act": c.Act}
	})
	h := hydratest.Start(t, hydratest.Options{TokenHookURL: hook, TopLevelClaims: []string{"act"}})
	client, err := h.CreateClient(ctx, hydratest.ClientSpec{GrantTypes: []string{exchange.GrantJWTBearer},
		Scopes: []string{"items:read"}, Audience: []string{"inventory", "billing"}})
	if err != nil {
		t.Fatal(err)
	}
	gatewayClient.Store(&client.ID)
	trust, err := h.TrustJWTBearer(ctx, hydratest.Trust{Issuer: client.ID, AnySubject: true, Scopes: []string{"items:read"},
		Key: publicJWK(t, pub, "gw-1"), ExpiresAt: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}

	// The resource APIs accept only Hydra-active tokens for their own audience.
	api := func(aud string) string {
		s := httptest.NewServer(h.Resource(aud, []string{"items:read"}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			in, _ := hydratest.TokenFrom(r)
			fmt.Fprintf(w, "%s items of %s, act %s", aud, in.Subject, asJSON(in.Ext["act"]))
		})))
		t.Cleanup(s.Close)
		return s.URL
	}
	iw := &inventoryWorker{apis: map[string]string{"inventory": api("inventory"), "billing": api("billing")}}
	wk, stop := tooltest.Start(t, tool.Config{Name: "delegated", ShutdownTimeout: 2 * time.Second},
		func(w *tool.Worker) { delegatedv1.RegisterDelegatedServiceServer(w, iw) })
	t.Cleanup(func() { _ = stop() })

	// The operator's connections file: one exchange provider, nothing to
	// connect to (so no key ring).
	if err := os.WriteFile(filepath.Join(dir, "secret"), []byte(client.Secret), 0o600); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "connections.json")
	conf := fmt.Sprintf(`{"providers": [{"name": "corp", "issuer": %q, "client_id": %q, "client_secret_file": "secret",
  "exchange": "jwt-bearer", "assertion_key_file": "assertion.pem", "assertion_key_id": "gw-1"}]}`, h.Issuer, client.ID)
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := natstest.Start(t)
	logs := &lockedBuffer{}
	log := slog.New(slog.NewJSONHandler(logs, nil))
	wiring, err := delegation.Open(ctx, file, srv.URL(), natsconn.Options{}, jsassets.Config{Storage: jsassets.StorageMemory, Profile: jsassets.ProfileDev}, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(wiring.Close)
	if wiring.Exchange() == nil || wiring.Tokens() != nil || wiring.Mounts() != nil {
		t.Fatal("an exchange-only connections file should give an exchanger and no connections")
	}
	g, err := gateway.New(ctx, gateway.Config{Listen: "127.0.0.1:0", Workers: []string{wk.Addr()}, NATSURL: srv.URL(),
		Auth: gateway.AuthConfig{HS256Secret: []byte(secret)}, Exchange: wiring.Exchange(), WarmUp: 50 * time.Millisecond, Logger: log})
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
	gc := toolfleetv1.NewToolGatewayServiceClient(conn)

	person := func(sub string) []string {
		return []string{"authorization", "Bearer " + signed(t, jwt.MapClaims{"sub": sub, "scope": "tools:call"})}
	}
	orchestrator := signed(t, jwt.MapClaims{"sub": "orchestrator", "scope": "tools:delegate"})
	forAlice := []string{"authorization", "Bearer " + orchestrator, "toolfleet-on-behalf-of", "alice", "toolfleet-on-behalf-scopes", "tools:call"}
	// check introspects the worker's latest token: active at Hydra, for the
	// gateway's client, sub, exactly the inventory audience (besides Hydra's
	// own token endpoint, which jwt-bearer assertions must name and Hydra
	// grants with the rest) and the tool's scopes, and the act chain.
	check := func(sub, act string) string {
		t.Helper()
		tok := iw.last(t)
		in, err := h.Introspect(ctx, tok)
		if err != nil {
			t.Fatal(err)
		}
		aud := slices.DeleteFunc(slices.Clone(in.Audience), func(a string) bool { return a == h.TokenURL() })
		if !in.Active || in.TokenUse != "access_token" || in.ClientID != client.ID || in.Subject != sub ||
			!slices.Equal(aud, []string{"inventory"}) || !slices.Equal(in.Scopes(), []string{"items:read"}) || asJSON(in.Ext["act"]) != act {
			t.Fatalf("introspection: active %v use %s client %s sub %s aud %v scopes %v act %s; want sub %s act %s",
				in.Active, in.TokenUse, in.ClientID, in.Subject, in.Audience, in.Scopes(), asJSON(in.Ext["act"]), sub, act)
		}
		return tok
	}
	gwAct := fmt.Sprintf(`{"sub":%q}`, client.ID)
	runAct := fmt.Sprintf(`{"act":{"sub":"orchestrator"},"sub":%q}`, client.ID)

	// Alice calls: the inventory API accepts her token, as her.
	st, body, err := callInventory(t, gc, "inventory", person("alice")...)
	if err != nil || st != http.StatusOK || !strings.HasPrefix(body, "inventory items of alice, act "+gwAct) {
		t.Fatalf("alice: %d %q (%v)", st, body, err)
	}
	aliceTok := check("alice", gwAct)
	// The same token (cached) is refused by an API of another audience.
	if st, _, err = callInventory(t, gc, "billing", person("alice")...); err != nil || st != http.StatusUnauthorized {
		t.Fatalf("billing with alice's inventory token: %d (%v), want 401", st, err)
	}
	if iw.last(t) != aliceTok || exchanges.Load() != 1 {
		t.Fatalf("alice's second call: %d exchanges, same token %v; want 1 and the cached token", exchanges.Load(), iw.last(t) == aliceTok)
	}
	// A second person gets their own.
	if st, body, err = callInventory(t, gc, "inventory", person("bob")...); err != nil || st != http.StatusOK || !strings.HasPrefix(body, "inventory items of bob") {
		t.Fatalf("bob: %d %q (%v)", st, body, err)
	}
	if bobTok := check("bob", gwAct); bobTok == aliceTok {
		t.Fatal("bob received alice's token")
	}
	// An agent run for alice (the orchestrator, holding tools:delegate):
	// sub alice, act the gateway acting for the orchestrator.
	if st, body, err = callInventory(t, gc, "inventory", forAlice...); err != nil || st != http.StatusOK || !strings.HasPrefix(body, "inventory items of alice, act "+runAct) {
		t.Fatalf("run for alice: %d %q (%v)", st, body, err)
	}
	if runTok := check("alice", runAct); runTok == aliceTok {
		t.Fatal("the run received alice's own (direct) token")
	}
	// A plain caller cannot claim to be a run: refused before any exchange.
	before := exchanges.Load()
	forged := append(person("bob"), "toolfleet-on-behalf-of", "alice", "toolfleet-on-behalf-scopes", "tools:call")
	if _, _, err = callInventory(t, gc, "inventory", forged...); status.Code(err) != codes.PermissionDenied || exchanges.Load() != before {
		t.Fatalf("bob claiming to act for alice: %v (%d exchanges)", err, exchanges.Load()-before)
	}
	// Hydra refuses once the operator withdraws the trust: PERMISSION_DENIED,
	// nothing runs (carol has no cached token).
	if err := h.DistrustJWTBearer(ctx, trust); err != nil {
		t.Fatal(err)
	}
	calls := len(iw.all())
	if _, _, err = callInventory(t, gc, "inventory", person("carol")...); status.Code(err) != codes.PermissionDenied || len(iw.all()) != calls {
		t.Fatalf("carol after the trust was withdrawn: %v, worker calls %d", err, len(iw.all())-calls)
	} else if m := status.Convert(err).Message(); !strings.Contains(m, "refused a token") {
		t.Fatalf("refusal message %q", m)
	}

	// The call events say who acted for whom with which credential; no
	// token is in them or in the gateway's logs.
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// Events are published asynchronously: read the stream until both are in.
	var haystack bytes.Buffer
	var sawRun, sawRefusal bool
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		haystack.Reset()
		haystack.WriteString(logs.String())
		sawRun, sawRefusal = false, false
		s, err := js.Stream(ctx, gateway.DefaultEventStream)
		if err != nil {
			t.Fatal(err)
		}
		for seq := uint64(1); seq <= s.CachedInfo().State.LastSeq; seq++ {
			m, err := s.GetMsg(ctx, seq)
			if err != nil {
				continue
			}
			haystack.Write(m.Data)
			var ev struct {
				UserID     string `json:"userId"`
				Via        string `json:"via"`
				Credential struct {
					Provider, Audience string
				} `json:"credential"`
			}
			_ = json.Unmarshal(m.Data, &ev)
			sawRun = sawRun || (ev.UserID == "alice" && ev.Via == "orchestrator" && ev.Credential.Provider == "corp" && ev.Credential.Audience == "inventory")
			sawRefusal = sawRefusal || (ev.UserID == "carol" && strings.Contains(string(m.Data), "refused"))
		}
		if sawRun && sawRefusal {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("call events: run for alice with the corp credential %v, carol's refusal %v", sawRun, sawRefusal)
		}
	}
	tokens := iw.all()
	if len(tokens) < 4 {
		t.Fatalf("%d tokens to look for", len(tokens))
	}
	for _, tok := range tokens {
		if strings.Contains(haystack.String(), tok) {
			t.Fatal("an exchanged token appears in the gateway's logs or call events")
		}
	}
	for _, md := range [][]string{person("alice"), forAlice} {
		if strings.Contains(haystack.String(), strings.TrimPrefix(md[1], "Bearer ")) {
			t.Fatal("a caller's token appears in the gateway's logs or call events")
		}
	}
}
