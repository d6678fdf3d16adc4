package gateway_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	delegatedv1 "github.com/toolfleet/toolfleet/gen/tools/delegated/v1"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/services/gateway"
	"github.com/toolfleet/toolfleet/services/gateway/connections"
	"github.com/toolfleet/toolfleet/services/gateway/exchange"
)

// inventory serves Delegated.Inventory: it answers with the digest of the
// corp token the gateway gave the call (never the token itself).
type inventory struct {
	delegatedv1.UnimplementedDelegatedServiceServer
}

func (inventory) Inventory(ctx context.Context, _ *delegatedv1.InventoryRequest) (*delegatedv1.InventoryResponse, error) {
	tok, err := tool.Credential(ctx, "corp")
	if err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	sum := sha256.Sum256([]byte(tok))
	return &delegatedv1.InventoryResponse{Status: 200, Body: hex.EncodeToString(sum[:])}, nil
}

// teServer is an RFC 8693 token endpoint for the gateway's calls: it issues
// a token naming the subject it recognised, and records each request's
// subject_token and actor_token.
type teServer struct {
	mu     sync.Mutex
	seen   []map[string]string
	issued []string
	refuse string // a subject it refuses
}

func (s *teServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if id, sec, ok := r.BasicAuth(); !ok || id != "toolfleet" || sec != "s3cret" {
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"error":"invalid_client"}`))
		return
	}
	_ = r.ParseForm()
	f := map[string]string{}
	for k := range r.PostForm {
		f[k] = r.PostForm.Get(k)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen = append(s.seen, f)
	w.Header().Set("Content-Type", "application/json")
	if s.refuse != "" && strings.Contains(f["subject_token"], s.refuse) {
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"error":"invalid_grant","error_description":"subject ` + f["subject_token"] + `"}`))
		return
	}
	tok := fmt.Sprintf("corp-token-%d", len(s.issued))
	s.issued = append(s.issued, tok)
	_ = json.NewEncoder(w).Encode(map[string]any{"access_token": tok, "token_type": "Bearer", "expires_in": 600, "scope": f["scope"]})
}

func (s *teServer) last() (map[string]string, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.issued) == 0 {
		return s.seen[len(s.seen)-1], ""
	}
	return s.seen[len(s.seen)-1], s.issued[len(s.issued)-1]
}

func digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// TestExchangedCredential: a tool of a first-party API gets a token the
// operator's server exchanged for exactly the authenticated caller: a
// direct caller's own bearer token is the subject_token; an agent run's
// call (a delegate holding tools:delegate) presents a subject JWT for the
// principal and the delegate's token as actor_token; a refusal is
// PERMISSION_DENIED with nothing of the server's answer; no token in logs.
func TestExchangedCredential(t *testing.T) {
	t.Parallel()
	te := &teServer{}
	srv := httptest.NewServer(te)
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKCS8PrivateKey(k)
	for name, b := range map[string][]byte{"key.pem": pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), "secret": []byte("s3cret")} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var logs lockedBuffer
	log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	set, err := exchange.New(t.Context(), []connections.Provider{{Name: "corp", TokenURL: srv.URL + "/token", ClientID: "toolfleet",
		ClientSecretFile: filepath.Join(dir, "secret"), Exchange: connections.ExchangeTokenExchange, AssertionKeyFile: filepath.Join(dir, "key.pem")}},
		exchange.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	w, _ := startWorker(t, "", func(w *tool.Worker) { delegatedv1.RegisterDelegatedServiceServer(w, inventory{}) })
	g := startGateway(t, gateway.Config{Workers: []string{w.Addr()}, Exchange: set, Logger: log})
	waitTool(t, g, "Delegated.Inventory")
	gc := grpcClient(t, g.Addr())
	token := func(sub, scope string) string {
		return signHS(t, map[string]any{"sub": sub, "scope": scope, "exp": time.Now().Add(time.Minute).Unix()})
	}
	call := func(md ...string) (string, error) {
		resp, err := gc.CallTool(metadata.AppendToOutgoingContext(t.Context(), md...),
			&toolfleetv1.CallToolRequest{ToolId: "Delegated.Inventory", Input: mustStruct(t, map[string]any{"api": "inventory"})})
		if err != nil {
			return "", err
		}
		if !resp.GetSuccess() {
			t.Fatalf("Inventory: %v", resp.GetError())
		}
		return resp.GetValue().GetStructValue().GetFields()["body"].GetStringValue(), nil
	}

	alice := token("alice", "tools:call")
	got, err := call("authorization", "Bearer "+alice)
	if err != nil {
		t.Fatal(err)
	}
	form, issued := te.last()
	if got != digest(issued) || form["subject_token"] != alice || form["subject_token_type"] != exchange.TokenTypeAccess ||
		form["actor_token"] != "" || form["audience"] != "inventory" || form["scope"] != "items:read" {
		t.Fatalf("alice's exchange: form %v, worker got the issued token: %v", form, got == digest(issued))
	}

	orchestrator := token("orchestrator", "tools:delegate")
	if got, err = call("authorization", "Bearer "+orchestrator, "toolfleet-on-behalf-of", "alice", "toolfleet-on-behalf-scopes", "tools:call"); err != nil {
		t.Fatal(err)
	}
	form, issued = te.last()
	var c struct {
		jwt.RegisteredClaims
		Act *exchange.Actor `json:"act"`
	}
	if _, err := jwt.ParseWithClaims(form["subject_token"], &c, func(*jwt.Token) (any, error) { return &k.PublicKey, nil }); err != nil {
		t.Fatalf("the run's subject token: %v", err)
	}
	if got != digest(issued) || c.Subject != "alice" || c.Issuer != "toolfleet" || c.Act == nil || c.Act.Sub != "toolfleet" ||
		c.Act.Act == nil || c.Act.Act.Sub != "orchestrator" || form["actor_token"] != orchestrator || form["subject_token_type"] != exchange.TokenTypeJWT {
		t.Fatalf("the run's exchange: form %v, claims %+v act %+v", form, c.RegisteredClaims, c.Act)
	}

	// The server refuses bob: PERMISSION_DENIED, its text and bob's token nowhere.
	bob := token("bob", "tools:call")
	te.mu.Lock()
	te.refuse = bob
	te.mu.Unlock()
	_, err = call("authorization", "Bearer "+bob)
	if st := status.Convert(err); st.Code() != codes.PermissionDenied || strings.Contains(st.Message(), bob) || strings.Contains(fmt.Sprint(st.Details()), bob) {
		t.Fatalf("bob: %v", err)
	}
	if strings.Contains(logs.String(), "corp-token-") || strings.Contains(logs.String(), alice) ||
		strings.Contains(logs.String(), bob) || strings.Contains(logs.String(), orchestrator) {
		t.Fatal("a token appears in the gateway's logs")
	}
	if !strings.Contains(logs.String(), "invalid_grant") {
		t.Fatal("the refusal's OAuth error is not logged")
	}
}

// TestExchangeNeedsAuthentication: with auth off (loopback development) a
// call naming a principal to act for is unauthenticated: nothing is
// exchanged, the tool is refused with UNIMPLEMENTED.
func TestExchangeNeedsAuthentication(t *testing.T) {
	t.Parallel()
	te := &teServer{}
	srv := httptest.NewServer(te)
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKCS8PrivateKey(k)
	for name, b := range map[string][]byte{"key.pem": pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), "secret": []byte("s3cret")} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// jwt-bearer: the gateway would assert whatever subject it were given.
	set, err := exchange.New(t.Context(), []connections.Provider{{Name: "corp", TokenURL: srv.URL, ClientID: "toolfleet",
		ClientSecretFile: filepath.Join(dir, "secret"), Exchange: connections.ExchangeJWTBearer, AssertionKeyFile: filepath.Join(dir, "key.pem")}},
		exchange.Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	w, _ := startWorker(t, "", func(w *tool.Worker) { delegatedv1.RegisterDelegatedServiceServer(w, inventory{}) })
	g := startGateway(t, gateway.Config{Workers: []string{w.Addr()}, Exchange: set, Auth: gateway.AuthConfig{Disabled: true}})
	waitTool(t, g, "Delegated.Inventory")
	gc := grpcClient(t, g.Addr())
	for _, md := range [][]string{nil, {"toolfleet-on-behalf-of", "alice", "toolfleet-on-behalf-scopes", "tools:call"}} {
		_, err := gc.CallTool(metadata.AppendToOutgoingContext(t.Context(), md...),
			&toolfleetv1.CallToolRequest{ToolId: "Delegated.Inventory", Input: mustStruct(t, map[string]any{"api": "inventory"})})
		if status.Code(err) != codes.Unimplemented {
			t.Fatalf("auth off, metadata %v: %v, want UNIMPLEMENTED", md, err)
		}
	}
	te.mu.Lock()
	defer te.mu.Unlock()
	if len(te.seen) != 0 {
		t.Fatalf("the server got %d exchanges with auth off", len(te.seen))
	}
}
