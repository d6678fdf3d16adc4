package gateway_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/oauth2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	delegatedv1 "github.com/toolfleet/toolfleet/gen/tools/delegated/v1"
	"github.com/toolfleet/toolfleet/internal/natsx/natstest"
	"github.com/toolfleet/toolfleet/sdk/client"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/services/gateway"
	"github.com/toolfleet/toolfleet/services/gateway/connections"
	"github.com/toolfleet/toolfleet/services/gateway/mcp"
)

// delegated serves Delegated.Profile: it reads the acme token the gateway
// gave the call and answers with its digest (never the token itself).
type delegated struct {
	delegatedv1.UnimplementedDelegatedServiceServer
}

func (delegated) Profile(ctx context.Context, _ *delegatedv1.ProfileRequest) (*delegatedv1.ProfileResponse, error) {
	tok, err := tool.Credential(ctx, "acme")
	if err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	if _, err := tool.Credential(ctx, "github"); !errors.Is(err, tool.ErrNoCredential) {
		return nil, status.Error(codes.Internal, "the call carries a credential its contract does not name")
	}
	sum := sha256.Sum256([]byte(tok))
	subject, _ := tool.Principal(ctx)
	return &delegatedv1.ProfileResponse{Status: 200, Body: subject, TokenSha256: hex.EncodeToString(sum[:])}, nil
}

// TestDelegatedCredential: a tool that names a credential receives the
// calling principal's token for it (and no other), the call event records
// which credential (never the token), a principal without a connection is
// asked to connect before anything runs, and the token appears in no log or
// event.
func TestDelegatedCredential(t *testing.T) {
	t.Parallel()
	var logs lockedBuffer
	log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	conns, natsURL := testConnections(t, log)
	const secret = "alice-acme-access-token-0123456789"
	if _, err := conns.Import(t.Context(), "alice", "acme", []string{"profile"},
		&oauth2.Token{AccessToken: secret, TokenType: "Bearer", Expiry: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	w, _ := startWorker(t, "", func(w *tool.Worker) { delegatedv1.RegisterDelegatedServiceServer(w, delegated{}) })
	g := startGateway(t, gateway.Config{NATSURL: natsURL, Workers: []string{w.Addr()}, Connections: conns, Logger: log})
	waitTool(t, g, "Delegated.Profile")
	def, err := g.GetTool(&toolfleetv1.GetToolRequest{ToolId: "Delegated.Profile"})
	if c := def.GetTool().GetRequirements().GetCredential(); err != nil || c.GetProvider() != "acme" || strings.Join(c.GetScopes(), " ") != "profile" {
		t.Fatalf("GetTool shows credential %v (%v)", c, err)
	}
	gc := grpcClient(t, g.Addr())
	as := func(sub string) context.Context {
		return metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+signHS(t, map[string]any{
			"sub": sub, "scope": "tools:call", "exp": time.Now().Add(time.Minute).Unix()}))
	}
	resp, err := gc.CallTool(as("alice"), &toolfleetv1.CallToolRequest{CallId: "c-alice", ToolId: "Delegated.Profile", Input: mustStruct(t, map[string]any{"part": "name"})})
	if err != nil || !resp.GetSuccess() {
		t.Fatalf("alice: %v, %v", resp, err)
	}
	sum := sha256.Sum256([]byte(secret))
	if v := resp.GetValue().GetStructValue().GetFields(); v["tokenSha256"].GetStringValue() != hex.EncodeToString(sum[:]) || v["body"].GetStringValue() != "alice" {
		t.Fatalf("the worker did not receive alice's token: %v", resp.GetValue())
	}
	// Bob has no connection: FailedPrecondition with how to connect; the tool did not run.
	_, err = gc.CallTool(as("bob"), &toolfleetv1.CallToolRequest{CallId: "c-bob", ToolId: "Delegated.Profile", Input: mustStruct(t, map[string]any{"part": "name"})})
	st := status.Convert(err)
	var need *toolfleetv1.ConnectionRequired
	for _, d := range st.Details() {
		if c, ok := d.(*toolfleetv1.ConnectionRequired); ok {
			need = c
		}
	}
	if st.Code() != codes.FailedPrecondition || need.GetProvider() != "acme" || strings.Join(need.GetScopes(), " ") != "profile" ||
		!strings.HasPrefix(need.GetAuthorizationUrl(), "http://127.0.0.1:8080/connections/start?state=") {
		t.Fatalf("bob: %v, detail %v", err, need)
	}
	if strings.Contains(st.Message(), need.GetAuthorizationUrl()) {
		t.Fatalf("the message (logged, in events) shows the authorization URL: %s", st.Message())
	}
	// The Go client SDK: a ServerError carrying the detail; through it, the
	// stdio bridge's MCP server (mcp.ClientBackend) answers as /mcp does.
	bobToken := signHS(t, map[string]any{"sub": "bob", "scope": "tools:call", "exp": time.Now().Add(time.Minute).Unix()})
	c, err := client.New(g.Addr(), client.WithToken(bobToken))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.CallTool(t.Context(), &toolfleetv1.CallToolRequest{ToolId: "Delegated.Profile", Input: mustStruct(t, map[string]any{})})
	var se *client.ServerError
	if !errors.As(err, &se) || se.Code != codes.FailedPrecondition || se.ConnectionRequired.GetProvider() != "acme" ||
		!strings.Contains(se.ConnectionRequired.GetAuthorizationUrl(), "/connections/start?state=") {
		t.Fatalf("sdk/client: %v (%+v)", err, se)
	}
	st2, ct := sdk.NewInMemoryTransports()
	bridge := mcp.New(mcp.ClientBackend(c), mcp.Options{Logger: log})
	bctx, bcancel := context.WithCancel(t.Context())
	bdone := make(chan error, 1)
	go func() { bdone <- bridge.Serve(bctx, st2) }()
	defer func() { bcancel(); <-bdone }()
	bs, err := sdk.NewClient(&sdk.Implementation{Name: "bridge", Version: "1"}, nil).Connect(t.Context(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer bs.Close()
	bres, err := bs.CallTool(t.Context(), &sdk.CallToolParams{Name: "Delegated_Profile", Arguments: map[string]any{}})
	if err != nil || !bres.IsError || bres.Meta[mcp.MetaConnectionRequired] == nil {
		t.Fatalf("the stdio bridge: %v, %+v", err, bres)
	}
	// OXP HTTP: 400 with the same answer in connection_required.
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+g.Addr()+"/tools/call",
		strings.NewReader(`{"request": {"tool_id": "Delegated.Profile", "input": {}}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+signHS(t, map[string]any{"sub": "bob", "scope": "tools:call", "exp": time.Now().Add(time.Minute).Unix()}))
	hresp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var oxpBody struct {
		Code       string `json:"code"`
		Connection struct {
			Provider string `json:"provider"`
			URL      string `json:"authorization_url"`
		} `json:"connection_required"`
	}
	_ = json.NewDecoder(hresp.Body).Decode(&oxpBody)
	_ = hresp.Body.Close()
	if hresp.StatusCode != http.StatusBadRequest || oxpBody.Code != "FAILED_PRECONDITION" || oxpBody.Connection.Provider != "acme" ||
		!strings.Contains(oxpBody.Connection.URL, "/connections/start?state=") {
		t.Fatalf("OXP: %d %+v", hresp.StatusCode, oxpBody)
	}
	// MCP: tools/list shows the credential; bob's call is a request to connect,
	// a URL elicitation (-32042) for a 2026-07-28 client that declared it,
	// else an isError result with the URL.
	bob := signHS(t, map[string]any{"sub": "bob", "scope": "tools:call", "exp": time.Now().Add(time.Minute).Unix()})
	for _, version := range []string{"2026-07-28", "2025-11-25"} {
		plain := connectMCPAt(t, g.Addr(), bob, version, nil)
		list, err := plain.ListTools(t.Context(), nil)
		if err != nil {
			t.Fatalf("%s tools/list: %v", version, err)
		}
		i := slices.IndexFunc(list.Tools, func(tl *sdk.Tool) bool { return tl.Name == "Delegated_Profile" })
		if i < 0 {
			t.Fatalf("%s tools/list has no Delegated_Profile: %v", version, list)
		}
		if c, _ := list.Tools[i].Meta[mcp.MetaCredential].(map[string]any); c["provider"] != "acme" || fmt.Sprint(c["scopes"]) != "[profile]" {
			t.Fatalf("%s tools/list _meta: %v", version, list.Tools[i].Meta)
		}
		res, err := plain.CallTool(t.Context(), &sdk.CallToolParams{Name: "Delegated_Profile", Arguments: map[string]any{}})
		if err != nil || !res.IsError {
			t.Fatalf("%s: call without URL elicitation: %v, %v", version, res, err)
		}
		c, _ := res.Meta[mcp.MetaConnectionRequired].(map[string]any)
		url, _ := c["url"].(string)
		if c["provider"] != "acme" || !strings.HasPrefix(url, "http://127.0.0.1:8080/connections/start?state=") {
			t.Fatalf("%s: isError result %v", version, res.Meta)
		}
		eliciting := connectMCPAt(t, g.Addr(), bob, version, &sdk.ClientOptions{
			Capabilities: &sdk.ClientCapabilities{Elicitation: &sdk.ElicitationCapabilities{URL: &sdk.URLElicitationCapabilities{}}},
			ElicitationHandler: func(context.Context, *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
				return &sdk.ElicitResult{Action: "decline"}, nil
			}})
		eres, err := eliciting.CallTool(t.Context(), &sdk.CallToolParams{Name: "Delegated_Profile", Arguments: map[string]any{}})
		if version < "2026-07-28" {
			// Stateless /mcp keeps no initialize: a 2025-11-25 client's
			// capabilities are unknown there, so it gets the isError result.
			if err != nil || eres.Meta[mcp.MetaConnectionRequired] == nil {
				t.Fatalf("%s: call with URL elicitation: %v, %+v", version, err, eres)
			}
			continue
		}
		var rpcErr *jsonrpc.Error
		if !errors.As(err, &rpcErr) || rpcErr.Code != sdk.CodeURLElicitationRequired ||
			!strings.Contains(string(rpcErr.Data), `"mode":"url"`) || !strings.Contains(string(rpcErr.Data), "/connections/start?state=") {
			t.Fatalf("%s: call with URL elicitation: %v, %+v", version, err, eres)
		}
	}
	// The audit trail: alice's event names the credential, never the token.
	evs := streamEventsOn(t, natsURL, "toolfleet.events.call.Delegated.Profile.succeeded", 1)
	var ev toolfleetv1.CallEvent
	if err := protojson.Unmarshal(evs[0].Data, &ev); err != nil {
		t.Fatal(err)
	}
	if c := ev.GetCredential(); ev.GetUserId() != "alice" || c.GetProvider() != "acme" || strings.Join(c.GetScopes(), " ") != "profile" || c.GetConnectionId() == "" {
		t.Fatalf("event %v", &ev)
	}
	failed := streamEventsOn(t, natsURL, "toolfleet.events.call.Delegated.Profile.failed", 8)
	for _, m := range append(evs, failed...) {
		if bytes.Contains(m.Data, []byte(secret)) || bytes.Contains(m.Data, []byte(need.GetAuthorizationUrl())) {
			t.Fatalf("event %s shows a token or an authorization URL", m.Subject)
		}
	}
	if strings.Contains(logs.String(), secret) || strings.Contains(logs.String(), need.GetAuthorizationUrl()) {
		t.Fatal("the gateway's logs show a token or an authorization URL")
	}
}

// A gateway without connections refuses a tool that names a credential,
// before it runs.
// testConnections is a connections service on an embedded NATS (its
// provider's endpoints are never reached: the tests import connections),
// and that NATS server's URL.
func testConnections(t *testing.T, log *slog.Logger) (*connections.Service, string) {
	t.Helper()
	srv := natstest.Start(t)
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	keys := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(keys, []byte(connections.NewKeyLine("k1")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ring, err := connections.LoadKeyRing(keys)
	if err != nil {
		t.Fatal(err)
	}
	conns, err := connections.New(t.Context(), js, connections.Config{
		Providers: []connections.Provider{{Name: "acme", ClientID: "toolfleet",
			AuthorizationURL: "https://acme.example/authorize", TokenURL: "https://acme.example/token"}},
		KeyRing: ring, PublicURL: "http://127.0.0.1:8080", Logger: log,
		Bucket: jetstream.KeyValueConfig{Bucket: "toolfleet_connections", Storage: jetstream.MemoryStorage, MaxBytes: 8 << 20},
	})
	if err != nil {
		t.Fatal(err)
	}
	return conns, srv.URL()
}

// TestCredentialWithAuthOff: with auth off nobody is authenticated, so a
// call that says it acts for alice (delegation metadata) gets the one local
// principal's connection, never alice's kept from a run with auth on.
func TestCredentialWithAuthOff(t *testing.T) {
	t.Parallel()
	conns, natsURL := testConnections(t, quiet())
	for sub, tok := range map[string]string{"alice": "alice-acme-token-kept-from-auth-on", gateway.AnonymousSubject: "the-laptop-owners-acme-token"} {
		if _, err := conns.Import(t.Context(), sub, "acme", []string{"profile"},
			&oauth2.Token{AccessToken: tok, TokenType: "Bearer", Expiry: time.Now().Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	w, _ := startWorker(t, "", func(w *tool.Worker) { delegatedv1.RegisterDelegatedServiceServer(w, delegated{}) })
	g := startGateway(t, gateway.Config{NATSURL: natsURL, Workers: []string{w.Addr()}, Connections: conns, Auth: gateway.AuthConfig{Disabled: true}})
	waitTool(t, g, "Delegated.Profile")
	ctx := metadata.AppendToOutgoingContext(t.Context(), gateway.HeaderOnBehalfOf, "alice")
	resp, err := grpcClient(t, g.Addr()).CallTool(ctx, &toolfleetv1.CallToolRequest{ToolId: "Delegated.Profile", Input: mustStruct(t, map[string]any{"part": "name"})})
	if err != nil || !resp.GetSuccess() {
		t.Fatalf("call: %v, %v", resp, err)
	}
	want := sha256.Sum256([]byte("the-laptop-owners-acme-token"))
	if got := resp.GetValue().GetStructValue().GetFields()["tokenSha256"].GetStringValue(); got != hex.EncodeToString(want[:]) {
		t.Fatalf("the worker received another token than the local principal's (alice's?): %s", got)
	}
}

func TestCredentialWithoutConnections(t *testing.T) {
	t.Parallel()
	w, _ := startWorker(t, "", func(w *tool.Worker) { delegatedv1.RegisterDelegatedServiceServer(w, delegated{}) })
	g := startGateway(t, gateway.Config{Workers: []string{w.Addr()}, Auth: gateway.AuthConfig{Disabled: true}})
	waitTool(t, g, "Delegated.Profile")
	_, err := grpcClient(t, g.Addr()).CallTool(t.Context(), &toolfleetv1.CallToolRequest{ToolId: "Delegated.Profile", Input: mustStruct(t, map[string]any{})})
	if status.Code(err) != codes.Unimplemented || !strings.Contains(err.Error(), "no connections configured") {
		t.Fatalf("err = %v", err)
	}
}
