package delegation_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
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
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/sdk/tool/tooltest"
	"github.com/toolfleet/toolfleet/services/gateway"
	"github.com/toolfleet/toolfleet/services/gateway/connections"
	"github.com/toolfleet/toolfleet/services/gateway/gatewaytest"

	"github.com/toolfleet/toolfleet/e2e/oauth/hydratest"
)

const (
	secret   = "delegation-test-secret-0123456789abcdef"
	audience = "acme-api"
)

// profileWorker serves Delegated.Profile: it calls the resource API with the
// token the gateway gave the call, and keeps every token it saw (the test
// greps for them).
type profileWorker struct {
	delegatedv1.UnimplementedDelegatedServiceServer
	api    string
	mu     sync.Mutex
	tokens map[string]bool
}

func (w *profileWorker) Profile(ctx context.Context, _ *delegatedv1.ProfileRequest) (*delegatedv1.ProfileResponse, error) {
	tok, err := tool.Credential(ctx, "acme")
	if err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	w.mu.Lock()
	w.tokens[tok] = true
	w.mu.Unlock()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.api+"/profile", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, status.Error(codes.Unavailable, "resource API unreachable")
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	return &delegatedv1.ProfileResponse{Status: int32(resp.StatusCode), Body: string(body)}, nil
}

func (w *profileWorker) seen() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for t := range w.tokens {
		out = append(out, t)
	}
	return out
}

// clock is the connections' clock, moved forward to bring tokens near expiry.
type clock struct{ offset atomic.Int64 }

func (c *clock) now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *clock) advance(d time.Duration) { c.offset.Add(int64(d)) }
func (c *clock) set(d time.Duration)     { c.offset.Store(int64(d)) }
func keyFile(t *testing.T, lines ...string) *connections.KeyRing {
	t.Helper()
	path := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := connections.LoadKeyRing(path)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// lockedBuffer collects logs from many goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// fleet is a gateway replica set sharing one NATS, one connections bucket
// and one worker.
type fleet struct {
	t       *testing.T
	js      jetstream.JetStream
	natsURL string
	worker  string
	tool    *profileWorker
	flow    *lateHandler
	public  string // the connect flow's origin (serves the first replica's connections handler)
	addr    string // the last replica's address
	logs    *lockedBuffer
	clock   *clock
	hydra   *hydratest.Server
	client  hydratest.Client
	secret  string
	tap     *tokenTap // the tokens the provider issued to the connections
}

func (f *fleet) provider() connections.Provider {
	path := filepath.Join(f.t.TempDir(), "client-secret")
	if err := os.WriteFile(path, []byte(f.client.Secret), 0o600); err != nil {
		f.t.Fatal(err)
	}
	return connections.Provider{Name: "acme", Issuer: f.hydra.Issuer, ClientID: f.client.ID, ClientSecretFile: path,
		Scopes: []string{"offline_access"}, Params: map[string]string{"audience": audience}}
}

// connections makes one replica's connections service.
func (f *fleet) connections(ring *connections.KeyRing) *connections.Service {
	f.t.Helper()
	s, err := connections.New(f.t.Context(), f.js, connections.Config{
		Providers: []connections.Provider{f.provider()}, KeyRing: ring, PublicURL: f.public,
		Bucket: jetstream.KeyValueConfig{Bucket: "toolfleet_connections", Storage: jetstream.MemoryStorage, MaxBytes: 16 << 20},
		Logger: slog.New(slog.NewJSONHandler(f.logs, nil)), Now: f.clock.now,
		// Hydra answers slowly on a loaded machine: a generous bound, not the default 15 s.
		HTTPClient: &http.Client{Timeout: 2 * time.Minute, Transport: f.tap},
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return s
}

// gateway runs a replica with conns until the test ends and returns a client.
func (f *fleet) gateway(conns *connections.Service) toolfleetv1.ToolGatewayServiceClient {
	f.t.Helper()
	g, err := gateway.New(f.t.Context(), gateway.Config{Listen: "127.0.0.1:0", Workers: []string{f.worker}, NATSURL: f.natsURL,
		Auth: gateway.AuthConfig{HS256Secret: []byte(secret)}, Connections: conns, WarmUp: 50 * time.Millisecond,
		Logger: slog.New(slog.NewJSONHandler(f.logs, nil))})
	if err != nil {
		f.t.Fatal(err)
	}
	gatewaytest.Run(f.t, g)
	gatewaytest.WaitTool(f.t, g, "Delegated.Profile")
	f.addr = g.Addr()
	conn, err := grpc.NewClient(g.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { _ = conn.Close() })
	return toolfleetv1.NewToolGatewayServiceClient(conn)
}

func bearer(t *testing.T, sub string) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": sub, "scope": "tools:call",
		"exp": time.Now().Add(10 * time.Minute).Unix()}).SignedString([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// call calls Delegated.Profile as sub: the resource API's status and body,
// or the ConnectionRequired detail of a refusal.
func call(t *testing.T, gc toolfleetv1.ToolGatewayServiceClient, sub string) (int32, string, *toolfleetv1.ConnectionRequired) {
	t.Helper()
	ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+bearer(t, sub))
	in, _ := structpb.NewStruct(map[string]any{"part": "name"})
	resp, err := gc.CallTool(ctx, &toolfleetv1.CallToolRequest{ToolId: "Delegated.Profile", Input: in})
	if err != nil {
		st := status.Convert(err)
		for _, d := range st.Details() {
			if c, ok := d.(*toolfleetv1.ConnectionRequired); ok && st.Code() == codes.FailedPrecondition {
				return 0, "", c
			}
		}
		t.Fatalf("call as %s: %v", sub, err)
	}
	if !resp.GetSuccess() {
		t.Fatalf("call as %s: %v", sub, resp.GetError())
	}
	f := resp.GetValue().GetStructValue().GetFields()
	return int32(f["status"].GetNumberValue()), f["body"].GetStringValue(), nil
}

// connect opens the authorization URL in a browser: the gateway's page
// naming the toolfleet account, its button (a same-origin POST), then every
// redirect: Hydra, its login and consent, the gateway's callback. It returns
// the status and the page where it stopped.
func connect(t *testing.T, link, hydraSubject string, h *hydratest.Server) (int, string) {
	t.Helper()
	h.Provider.SetSubject(hydraSubject)
	browser := hydratest.NewBrowser()
	resp, err := browser.Get(link)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 8<<10))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `method="post"`) {
		return resp.StatusCode, string(body)
	}
	u, err := url.Parse(link)
	if err != nil {
		t.Fatal(err)
	}
	resp, err = browser.PostForm(u.Scheme+"://"+u.Host+u.Path, url.Values{"state": {u.Query().Get("state")}})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ = io.ReadAll(io.LimitReader(resp.Body, 8<<10))
	return resp.StatusCode, string(body)
}

func startFleet(t *testing.T, opts hydratest.Options) *fleet {
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
	h := hydratest.Start(t, opts)
	// The gateway's connect endpoints: a listener first, so that its URL is
	// the redirect URI registered at Hydra.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	public := "http://" + ln.Addr().String()
	f := &fleet{t: t, js: js, natsURL: srv.URL(), public: public, logs: &lockedBuffer{}, clock: &clock{}, hydra: h, tap: &tokenTap{}}
	f.client = h.ConfidentialClient(t, public+connections.CallbackPath, []string{"offline_access", "profile"}, audience)
	api := httptest.NewServer(h.Resource(audience, []string{"profile"}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in, _ := hydratest.TokenFrom(r)
		fmt.Fprintf(w, "profile of %s", in.Subject)
	})))
	t.Cleanup(api.Close)
	pw := &profileWorker{api: api.URL, tokens: map[string]bool{}}
	w, stop := tooltest.Start(t, tool.Config{Name: "delegated", ShutdownTimeout: 2 * time.Second},
		func(w *tool.Worker) { delegatedv1.RegisterDelegatedServiceServer(w, pw) })
	t.Cleanup(func() { _ = stop() })
	f.worker, f.tool = w.Addr(), pw
	// The flow's handler is served by whichever replica the test makes first (set below).
	handler := &lateHandler{}
	hs := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { _ = hs.Close() })
	f.flow = handler
	return f
}

// lateHandler serves a handler set after it starts listening.
type lateHandler struct{ h atomic.Pointer[http.Handler] }

func (l *lateHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h := l.h.Load(); h != nil {
		(*h).ServeHTTP(w, r)
		return
	}
	http.Error(w, "starting", http.StatusServiceUnavailable)
}

func (l *lateHandler) set(h http.Handler) { l.h.Store(&h) }

// TestConnectCallRefreshRevoke: alice is asked to connect, connects through
// real redirects (code + PKCE at Hydra), and the tool reads her profile with
// her token; bob never gets it; two replicas whose tokens are about to
// expire refresh once between them; a rotated key ring keeps the
// connection; revoke ends it at Hydra; no token is in a log or an event.
func TestConnectCallRefreshRevoke(t *testing.T) {
	refreshes := atomic.Int64{}
	hook := hydratest.ServeTokenHook(t, func(r hydratest.TokenRequest) map[string]any {
		for _, g := range r.GrantTypes {
			if g == "refresh_token" {
				refreshes.Add(1)
			}
		}
		return nil
	})
	f := startFleet(t, hydratest.Options{TokenHookURL: hook})
	k1, k2 := connections.NewKeyLine("k1"), connections.NewKeyLine("k2")
	// A key rotation as docs/credentials.md describes it: every replica knows
	// the new key k2 before one makes it active (the first replica is in
	// that middle state, the second has k2 active and k1 kept below).
	first := f.connections(keyFile(t, k1, k2))
	f.flow.set(first.Handler())
	g1 := f.gateway(first)

	// Not connected: a request to connect, nothing ran.
	_, _, need := call(t, g1, "alice")
	if need == nil || need.GetProvider() != "acme" || !strings.HasPrefix(need.GetAuthorizationUrl(), f.public+connections.StartPath) {
		t.Fatalf("alice before connecting: %v", need)
	}
	if len(f.tool.seen()) != 0 {
		t.Fatal("the tool ran without a connection")
	}
	link := need.GetAuthorizationUrl()
	code, page := connect(t, link, "alice@acme", f.hydra)
	if code != http.StatusOK || !strings.Contains(page, "Connected your acme account") {
		t.Fatalf("connect: %d %s", code, page)
	}
	st, body, need := call(t, g1, "alice")
	if need != nil || st != http.StatusOK || body != "profile of alice@acme" {
		t.Fatalf("alice's call: %d %q %v", st, body, need)
	}
	// The same start link a second time: refused (single use).
	if code, _ := connect(t, link, "mallory@acme", f.hydra); code == http.StatusOK {
		t.Fatal("a used connect link connected again")
	}
	// Bob, another tenant: asked to connect, never given alice's token.
	before := len(f.tool.seen())
	if _, _, need := call(t, g1, "bob"); need == nil {
		t.Fatal("bob got a token without connecting")
	}
	if len(f.tool.seen()) != before {
		t.Fatal("the tool ran for bob")
	}

	// Two replicas (the second with a rotated key ring: k2 active, k1 kept),
	// tokens about to expire: calls on both at once refresh exactly once.
	second := f.connections(keyFile(t, k2, k1))
	g2 := f.gateway(second)
	f.clock.set(59 * time.Minute) // Hydra's access tokens last an hour; the gateway refreshes 2 min before
	var wg sync.WaitGroup
	results := make(chan string, 8)
	for i := range 8 {
		gc := g1
		if i%2 == 1 {
			gc = g2
		}
		wg.Go(func() {
			st, body, need := call(t, gc, "alice")
			results <- fmt.Sprintf("%d %s %v", st, body, need.GetReason())
		})
	}
	wg.Wait()
	close(results)
	for r := range results {
		if r != "200 profile of alice@acme " {
			t.Fatalf("a call during the refresh: %s", r)
		}
	}
	if n := refreshes.Load(); n != 1 {
		t.Fatalf("%d refreshes across two replicas, want exactly 1", n)
	}
	tokens := f.tool.seen()
	if len(tokens) != 2 {
		t.Fatalf("the tool saw %d distinct tokens, want 2 (before and after the refresh)", len(tokens))
	}

	// Revoke on the second replica: gone here and at Hydra.
	if found, err := second.Revoke(t.Context(), "alice", "acme"); !found || err != nil {
		t.Fatalf("revoke: %v, %v", found, err)
	}
	for _, tok := range tokens {
		in, err := f.hydra.Introspect(t.Context(), tok)
		if err != nil || in.Active {
			t.Fatalf("a token of the revoked connection is still active at Hydra (%v)", err)
		}
	}
	if _, _, need := call(t, g1, "alice"); need == nil {
		t.Fatal("alice's call after revoking did not ask to connect")
	}

	// No token anywhere it must not be: the gateways' logs, the call events,
	// the connections bucket's raw bytes.
	var haystack bytes.Buffer
	haystack.WriteString(f.logs.String())
	for _, stream := range []string{gateway.DefaultEventStream, "KV_toolfleet_connections"} {
		s, err := f.js.Stream(t.Context(), stream)
		if err != nil {
			t.Fatal(err)
		}
		for seq := uint64(1); seq <= s.CachedInfo().State.LastSeq; seq++ {
			if m, err := s.GetMsg(t.Context(), seq); err == nil {
				haystack.Write(m.Data)
				for k, v := range m.Header {
					haystack.WriteString(k + ": " + strings.Join(v, ",") + "\n")
				}
			}
		}
	}
	if haystack.Len() == 0 {
		t.Fatal("nothing to search")
	}
	for _, tok := range tokens {
		if strings.Contains(haystack.String(), tok) {
			t.Fatal("a token appears in the logs, events or the stored connections")
		}
	}
}

// TestExpiredRefreshTokenAsksToConnect: when Hydra no longer accepts the
// connection's refresh token, the call is a request to connect again.
func TestExpiredRefreshTokenAsksToConnect(t *testing.T) {
	f := startFleet(t, hydratest.Options{AccessTokenTTL: 2 * time.Second, RefreshTokenTTL: 3 * time.Second})
	conns := f.connections(keyFile(t, connections.NewKeyLine("k")))
	f.flow.set(conns.Handler())
	gc := f.gateway(conns)
	_, _, need := call(t, gc, "carol")
	if need == nil {
		t.Fatal("carol was not asked to connect")
	}
	if code, page := connect(t, need.GetAuthorizationUrl(), "carol@acme", f.hydra); code != http.StatusOK {
		t.Fatalf("connect: %d %s", code, page)
	}
	if st, _, need := call(t, gc, "carol"); st != http.StatusOK || need != nil {
		t.Fatalf("carol's first call: %d %v", st, need)
	}
	time.Sleep(4 * time.Second) // past the refresh token's lifetime at Hydra
	_, _, need = call(t, gc, "carol")
	if need == nil || !strings.Contains(need.GetReason(), "no longer accepts") {
		t.Fatalf("after the refresh token expired: %v", need)
	}
	if list, err := conns.List(t.Context(), "carol"); err != nil || len(list) != 0 {
		t.Fatalf("the dead connection is still listed: %+v, %v", list, err)
	}
}
