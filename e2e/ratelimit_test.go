package e2e_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/toolfleet/toolfleet/e2e"
	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/gen/toolfleet/v1/toolfleetv1connect"
	"github.com/toolfleet/toolfleet/sdk/client"
	"github.com/toolfleet/toolfleet/services/gateway/mcp"
	"github.com/toolfleet/toolfleet/services/gateway/ratelimit"
)

// TestRateLimitAcrossReplicasOnEverySurface: two gateway replicas share one
// principal's rate through NATS. Once the principal has spent its burst
// (calls spread over both replicas), every surface refuses the next call
// with a retry-after: gRPC and Connect (RESOURCE_EXHAUSTED with RetryInfo),
// OXP HTTP (429, Retry-After), MCP (isError, _meta retry-after) and the Go
// client (a ServerError with RetryAfter). The refused calls do not run;
// another principal, and the same principal on a tool outside the rule, are
// not limited.
//
// The rate is one call a minute, so no refill happens while the test runs,
// however slow the machine.
func TestRateLimitAcrossReplicasOnEverySurface(t *testing.T) {
	// Not parallel: three gateways busy on 2 cores starve the timing-bound
	// abuse checks (TestFleetSurvivesAbuse) that run in parallel.
	fleet := e2e.Start(t, e2e.Options{NATS: true, Auth: true, Limits: ratelimit.Config{Rules: []ratelimit.Rule{
		{Name: "calc-rate", Tool: "calculator.add", Rate: 1.0 / 60, Burst: 4},
	}}})
	a, b := fleet.Addr, fleet.Replica(t)
	alice := fleet.TokenFor(t, "alice", "tools:call")
	bob := fleet.TokenFor(t, "bob", "tools:call")
	add := &toolfleetv1.CallToolRequest{ToolId: "Calculator.Add", Input: input(t, map[string]any{"a": 1, "b": 2})}

	grpcA, grpcB := gatewayGRPC(t, a), gatewayGRPC(t, b)
	withToken := func(tok string) context.Context {
		return metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+tok)
	}
	for i := range 4 { // the burst, alternating replicas
		c := []toolfleetv1.ToolGatewayServiceClient{grpcA, grpcB}[i%2]
		if _, err := c.CallTool(withToken(alice), add); err != nil {
			t.Fatalf("call %d within the burst: %v", i+1, err)
		}
	}
	ran := fleet.Calculator.Adds.Load()

	// gRPC, on either replica.
	for name, c := range map[string]toolfleetv1.ToolGatewayServiceClient{"gRPC replica A": grpcA, "gRPC replica B": grpcB} {
		_, err := c.CallTool(withToken(alice), add)
		st := status.Convert(err)
		if st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), `rate limit "calc-rate"`) {
			t.Fatalf("%s: %v, want RESOURCE_EXHAUSTED naming the rule", name, err)
		}
		checkDelay(t, name, retryInfo(st.Details()))
		if strings.Contains(st.Message(), "alice") {
			t.Errorf("%s: the message names the principal: %s", name, st.Message())
		}
	}

	// Connect.
	_, err := toolfleetv1connect.NewToolGatewayServiceClient(http.DefaultClient, "http://"+b).CallTool(t.Context(), authed(add, alice))
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeResourceExhausted {
		t.Fatalf("Connect: %v, want resource_exhausted", err)
	}
	var details []any
	for _, d := range ce.Details() {
		if v, err := d.Value(); err == nil {
			details = append(details, v)
		}
	}
	checkDelay(t, "Connect", retryInfo(details))

	// OXP HTTP.
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+a+"/tools/call",
		strings.NewReader(`{"request":{"tool_id":"Calculator.Add","input":{"a":1,"b":2}}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+alice)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var body struct {
		Code         string `json:"code"`
		Message      string `json:"message"`
		RetryAfterMs int64  `json:"retry_after_ms"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&body)
	_ = resp.Body.Close()
	secs, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
	if resp.StatusCode != http.StatusTooManyRequests || secs < 1 || secs > 60 || body.Code != "RESOURCE_EXHAUSTED" {
		t.Fatalf("OXP: %d, Retry-After %q, body %+v; want 429 with Retry-After 1..60", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	checkDelay(t, "OXP body", time.Duration(body.RetryAfterMs)*time.Millisecond)

	// MCP, on the other replica.
	cs := mcpSession(t, b, alice)
	res, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "Calculator_Add", Arguments: map[string]any{"a": 1, "b": 2}})
	if err != nil || !res.IsError {
		t.Fatalf("MCP: %+v, %v; want an isError result", res, err)
	}
	ms, _ := res.Meta[mcp.MetaRetryAfterMs].(float64)
	checkDelay(t, "MCP _meta", time.Duration(ms)*time.Millisecond)
	if text := res.Content[0].(*sdk.TextContent).Text; !strings.Contains(text, "Try again in") {
		t.Errorf("MCP text %q says not when to try again", text)
	}

	// The Go client: the delay is longer than its retries wait, so it
	// returns the refusal with the delay at once.
	c, err := client.New(a, client.WithToken(alice))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.CallTool(t.Context(), add)
	var se *client.ServerError
	if !errors.As(err, &se) || se.Code != codes.ResourceExhausted {
		t.Fatalf("client: %v, want a ResourceExhausted ServerError", err)
	}
	checkDelay(t, "client", se.RetryAfter)

	if n := fleet.Calculator.Adds.Load(); n != ran {
		t.Fatalf("refused calls ran the tool %d times", n-ran)
	}
	// The refusals are counted by rule, never by principal.
	mresp, err := http.Get("http://" + a + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	var metrics strings.Builder
	_, _ = io.Copy(&metrics, mresp.Body)
	_ = mresp.Body.Close()
	if !strings.Contains(metrics.String(), `toolfleet_gateway_limit_decisions_total{decision="refused",limit="rate",rule="calc-rate"}`) ||
		strings.Contains(metrics.String(), "alice") {
		t.Errorf("/metrics lacks the refusals of calc-rate, or names the principal")
	}
	// Another principal, and another tool, are not limited.
	for _, c := range []toolfleetv1.ToolGatewayServiceClient{grpcA, grpcB} {
		if _, err := c.CallTool(withToken(bob), add); err != nil {
			t.Fatalf("bob was refused: %v", err)
		}
		if _, err := c.CallTool(withToken(alice), &toolfleetv1.CallToolRequest{ToolId: "SchemaTest.Sleep",
			Input: input(t, map[string]any{"duration": "0s"})}); err != nil {
			t.Fatalf("a tool outside the rule was refused: %v", err)
		}
	}
}

// TestConcurrencyLimitAcrossReplicas: a call running on one replica takes the
// principal's only slot on the other; once it ends the other replica admits
// again.
func TestConcurrencyLimitAcrossReplicas(t *testing.T) {
	// Not parallel, like TestRateLimitAcrossReplicasOnEverySurface.
	fleet := e2e.Start(t, e2e.Options{NATS: true, Auth: true, Limits: ratelimit.Config{Rules: []ratelimit.Rule{
		{Name: "one-at-a-time", Tool: "schematest.*", Concurrent: 1},
	}}})
	a, b := fleet.Addr, fleet.Replica(t)
	alice := fleet.TokenFor(t, "alice", "tools:call")
	ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+alice)
	sleep := func(d string) *toolfleetv1.CallToolRequest {
		return &toolfleetv1.CallToolRequest{ToolId: "SchemaTest.Sleep", Input: input(t, map[string]any{"duration": d})}
	}
	grpcA, grpcB := gatewayGRPC(t, a), gatewayGRPC(t, b)

	release := make(chan struct{})
	done := make(chan error, 1)
	// The long call holds the slot on replica A until the test lets it end
	// (a 20 s sleep the test cancels).
	longCtx, cancelLong := context.WithCancel(ctx)
	sleeps := fleet.SchemaTest.Sleeps.Load()
	go func() {
		_, err := grpcA.CallTool(longCtx, sleep("20s"))
		done <- err
		close(release)
	}()
	// Only once the long call runs on the worker does B probe: a probe
	// before it would hold the slot and the long call would be refused.
	for deadline := time.Now().Add(15 * time.Second); fleet.SchemaTest.Sleeps.Load() == sleeps; time.Sleep(20 * time.Millisecond) {
		select {
		case err := <-done:
			t.Fatalf("the long call ended before it ran: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the long call never reached the worker")
		}
	}
	// Replica B refuses alice while the call runs.
	var refused error
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		_, err := grpcB.CallTool(ctx, sleep("0s"))
		if status.Code(err) == codes.ResourceExhausted {
			refused = err
			break
		}
	}
	if refused == nil {
		t.Fatal("replica B never refused a second running call")
	}
	st := status.Convert(refused)
	if !strings.Contains(st.Message(), `"one-at-a-time"`) || retryInfo(st.Details()) <= 0 {
		t.Fatalf("refusal %v: want the rule named and a retry delay", refused)
	}
	// Calculator is outside the rule.
	if _, err := grpcB.CallTool(ctx, &toolfleetv1.CallToolRequest{ToolId: "Calculator.Add", Input: input(t, map[string]any{"a": 1, "b": 1})}); err != nil {
		t.Fatalf("a tool outside the rule was refused: %v", err)
	}
	cancelLong()
	<-release
	if err := <-done; status.Code(err) != codes.Canceled {
		t.Errorf("the long call ended with %v, want it cancelled by the test", err)
	}
	// Once released (written within the sync interval), B admits again.
	var err error
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if _, err = grpcB.CallTool(ctx, sleep("0s")); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("replica B still refuses after the call on A ended: %v", err)
	}
}

func gatewayGRPC(t *testing.T, addr string) toolfleetv1.ToolGatewayServiceClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return toolfleetv1.NewToolGatewayServiceClient(cc)
}

func authed(m *toolfleetv1.CallToolRequest, tok string) *connect.Request[toolfleetv1.CallToolRequest] {
	r := connect.NewRequest(m)
	r.Header().Set("Authorization", "Bearer "+tok)
	return r
}

// retryInfo is the RetryInfo delay among status details (0 when none).
func retryInfo[T any](details []T) time.Duration {
	for _, d := range details {
		if ri, ok := any(d).(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration()
		}
	}
	return 0
}

// checkDelay: a refusal by a one-call-a-minute rate says to come back within
// the minute.
func checkDelay(t *testing.T, surface string, d time.Duration) {
	t.Helper()
	if d <= 0 || d > time.Minute {
		t.Errorf("%s: retry after %s, want within (0, 1m]", surface, d)
	}
}

type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

func mcpSession(t *testing.T, addr, token string) *sdk.ClientSession {
	t.Helper()
	c := sdk.NewClient(&sdk.Implementation{Name: "ratelimit-test", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: "http://" + addr + "/mcp",
		HTTPClient: &http.Client{Transport: bearer{token}, Timeout: time.Minute}, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// TestClientWaitsForTheRateLimit: the Go client retries a call refused over a
// rate after the delay the gateway gave (gRPC and Connect; and a CallTools
// batch, whose refused call carries retry_after_ms), so the caller sees a
// success on the second attempt. One call per 2 s with a burst of 1: the
// second call is refused unless 2 s pass between two back-to-back calls.
// (The rules of these tests name Calculator.Add only: the fleet probes its
// idempotency store with Calculator.Multiply.)
func TestClientWaitsForTheRateLimit(t *testing.T) {
	// Not parallel, like TestRateLimitAcrossReplicasOnEverySurface.
	fleet := e2e.Start(t, e2e.Options{NATS: true, Auth: true, Limits: ratelimit.Config{Rules: []ratelimit.Rule{
		{Name: "slow", Tool: "calculator.add", Rate: 0.5, Burst: 1},
	}}})
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			c := newClient(t, fleet.Addr, append(p.opts, client.WithToken(fleet.TokenFor(t, "client-"+p.name, "tools:call")))...)
			add := &toolfleetv1.CallToolRequest{ToolId: "Calculator.Add", Input: input(t, map[string]any{"a": 1, "b": 2})}
			if res, err := c.CallTool(t.Context(), add); err != nil || !res.Success {
				t.Fatalf("first call: %+v, %v", res, err)
			}
			res, err := c.CallTool(t.Context(), add)
			if err != nil || !res.Success || res.Attempts != 2 {
				t.Fatalf("second call: %+v, %v; want a success on attempt 2 (after the gateway's delay)", res, err)
			}
		})
	}
	t.Run("batch", func(t *testing.T) {
		t.Parallel()
		c := newClient(t, fleet.Addr, client.WithToken(fleet.TokenFor(t, "client-batch", "tools:call")))
		add := &toolfleetv1.CallToolRequest{ToolId: "Calculator.Add", Input: input(t, map[string]any{"a": 1, "b": 2})}
		out, err := c.CallTools(t.Context(), add, add)
		if err != nil {
			t.Fatal(err)
		}
		attempts := 0
		for i, o := range out {
			if o.Err != nil || !o.Result.Success {
				t.Fatalf("call %d: %+v, %v", i, o.Result, o.Err)
			}
			attempts += o.Result.Attempts
		}
		if attempts != 3 {
			t.Fatalf("%d attempts for two calls, want 3 (one call refused once, then retried after the delay)", attempts)
		}
	})
}
