package gateway_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	calculatorv1 "github.com/toolfleet/toolfleet/gen/tools/calculator/v1"
	"github.com/toolfleet/toolfleet/internal/natsx/natstest"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/sdk/tool/tooltest"
	"github.com/toolfleet/toolfleet/services/gateway"
	"github.com/toolfleet/toolfleet/workers/calculator/calculator"
)

// outcome of one attempt on one surface: done (the tool answered), retry
// (UNAVAILABLE: the gateway is starting), or anything else, which fails.
type attempt int

const (
	done attempt = iota
	retry
)

// TestColdStartNeverNotFound: a gateway that starts while a worker already
// announces (and will not announce again for its whole 5 s interval: only the
// gateway's discovery probe makes it announce) answers a call of the worker's
// tool, on every surface, from its first moment with either the result or a
// retryable UNAVAILABLE — never NOT_FOUND; readiness is NOT_SERVING until the
// registry is warm; after that an unknown tool is NOT_FOUND as always.
func TestColdStartNeverNotFound(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	announced := make(chan *nats.Msg, 16)
	sub, err := nc.ChanSubscribe(tool.AnnounceSubject, announced)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	tooltest.Start(t, tool.Config{Name: "calculator", NATSURL: srv.URL(), ShutdownTimeout: 2 * time.Second},
		func(w *tool.Worker) { calculatorv1.RegisterCalculatorServiceServer(w, calculator.New()) })
	select { // the worker's own first announcement went out before the gateway listens
	case <-announced:
	case <-time.After(20 * time.Second):
		t.Fatal("the worker never announced")
	}

	g := startGateway(t, gateway.Config{NATSURL: srv.URL(), WarmUp: gateway.DefaultWarmUp, Auth: gateway.AuthConfig{Disabled: true},
		Idempotency: memIdempotency, Results: memResults})
	input := map[string]any{"a": 2, "b": 3}
	in, _ := structpb.NewStruct(input)
	grpcc := grpcClient(t, g.Addr())
	connectc := connectClient(g.Addr())
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var cs *sdk.ClientSession // connected after the first surfaces: initialize takes a while
	defer func() {
		if cs != nil {
			cs.Close()
		}
	}()

	surfaces := []struct {
		name string
		call func(toolID string) (attempt, string)
	}{
		// First, while the registry surely warms up: a listing that asks
		// for the tool (a run's or program's tool pattern) gets it or
		// UNAVAILABLE, never an empty list (they would conclude that no tool
		// matches).
		{"gRPC ListTools filter", func(id string) (attempt, string) {
			resp, err := grpcc.ListTools(ctx, &toolfleetv1.ListToolsRequest{Filter: id})
			switch {
			case status.Code(err) == codes.Unavailable:
				return retry, status.Convert(err).Message()
			case err != nil:
				return -1, err.Error()
			case len(resp.GetTools()) > 0:
				return done, ""
			}
			return -1, "an empty listing"
		}},
		{"gRPC", func(id string) (attempt, string) {
			_, err := grpcc.CallTool(ctx, &toolfleetv1.CallToolRequest{ToolId: id, Input: in})
			switch status.Code(err) {
			case codes.OK:
				return done, ""
			case codes.Unavailable:
				return retry, status.Convert(err).Message()
			}
			return -1, err.Error()
		}},
		{"Connect", func(id string) (attempt, string) {
			_, err := connectc.CallTool(ctx, connect.NewRequest(&toolfleetv1.CallToolRequest{ToolId: id, Input: in}))
			switch connect.CodeOf(err) {
			case connect.CodeUnavailable:
				return retry, err.Error()
			}
			if err == nil {
				return done, ""
			}
			return -1, err.Error()
		}},
		{"OXP", func(id string) (attempt, string) {
			body := `{"request": {"tool_id": "` + id + `", "input": {"a": 2, "b": 3}}}`
			resp, err := http.Post("http://"+g.Addr()+"/tools/call", "application/json", bytes.NewBufferString(body))
			if err != nil {
				return -1, err.Error()
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			switch {
			case resp.StatusCode == http.StatusOK:
				return done, ""
			case resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != "":
				return retry, string(b)
			}
			return -1, resp.Status + " " + string(b)
		}},
		{"MCP", func(id string) (attempt, string) {
			res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: strings.ReplaceAll(id, ".", "_"), Arguments: input})
			var je *jsonrpc.Error
			switch {
			case err == nil && !res.IsError:
				return done, ""
			case errors.As(err, &je) && strings.Contains(string(je.Data), "UNAVAILABLE"):
				return retry, je.Message
			case err != nil && strings.Contains(err.Error(), "UNAVAILABLE"):
				return retry, err.Error()
			case err != nil:
				return -1, err.Error()
			}
			return -1, "isError result"
		}},
	}

	// From the first moment: the tool's result or UNAVAILABLE, never NOT_FOUND.
	retried := 0
	for _, s := range surfaces {
		if s.name == "MCP" && cs == nil {
			mcpc := sdk.NewClient(&sdk.Implementation{Name: "warm-test", Version: "1"}, nil)
			if cs, err = mcpc.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: "http://" + g.Addr() + "/mcp", MaxRetries: -1}, nil); err != nil {
				t.Fatal(err)
			}
		}
		for {
			if !gateway.WarmForTest(g) && g.Serving() {
				t.Fatal("readiness SERVING before the registry is warm")
			}
			a, msg := s.call("Calculator.Add")
			if a == done {
				break
			}
			if a != retry {
				t.Fatalf("%s: Calculator.Add right after start: %s; want the result or UNAVAILABLE", s.name, msg)
			}
			if !strings.Contains(msg, "try again") {
				t.Errorf("%s: UNAVAILABLE says %q; want it to say to try again", s.name, msg)
			}
			retried++
			if ctx.Err() != nil {
				t.Fatalf("%s: Calculator.Add never answered", s.name)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	t.Logf("%d attempts answered UNAVAILABLE before the tool answered", retried)

	// Once warm: ready, and an unknown tool is NOT_FOUND on every surface.
	waitFor(t, "readiness", g.Serving)
	if !gateway.WarmForTest(g) {
		t.Fatal("readiness SERVING before the registry is warm")
	}
	for _, s := range surfaces {
		a, msg := s.call("Calculator.Nope")
		if a == done || a == retry {
			t.Errorf("%s: an unknown tool after warm-up: %v %s; want NOT_FOUND", s.name, a, msg)
		}
	}
	if _, err := grpcc.CallTool(ctx, &toolfleetv1.CallToolRequest{ToolId: "Calculator.Nope", Input: in}); status.Code(err) != codes.NotFound {
		t.Errorf("gRPC: an unknown tool after warm-up: %v; want NOT_FOUND", err)
	}
}

// TestListingWhileWarming: while the registry may not have loaded every
// worker, a listing that asks for particular tools (a filter or a toolkit)
// and matches nothing answers UNAVAILABLE with "try again" — a run or program
// resolving its tool patterns retries instead of failing on "no tool
// matches"; once warm, the same listing is empty and OK. An unfiltered
// listing is never refused.
func TestListingWhileWarming(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	start := func(warmUp time.Duration) (*gateway.Gateway, toolfleetv1.ToolGatewayServiceClient) {
		g := startGateway(t, gateway.Config{NATSURL: srv.URL(), WarmUp: warmUp, Auth: gateway.AuthConfig{Disabled: true},
			Idempotency: memIdempotency, Results: memResults})
		return g, grpcClient(t, g.Addr())
	}
	ctx := t.Context()
	// A warm-up far longer than the checks: the registry is surely warming.
	warming, grpcc := start(time.Minute)
	for _, req := range []*toolfleetv1.ListToolsRequest{{Filter: "KV.*"}, {Filter: "KV.Increment"}, {Toolkit: "KV"}, {Filter: "*.Get*"}} {
		_, err := grpcc.ListTools(ctx, req)
		if status.Code(err) != codes.Unavailable || !strings.Contains(status.Convert(err).Message(), "try again") {
			t.Errorf("ListTools %v while warming: %v; want UNAVAILABLE saying to try again", req, err)
		}
	}
	if _, err := grpcc.ListTools(ctx, &toolfleetv1.ListToolsRequest{}); err != nil {
		t.Errorf("an unfiltered listing while warming: %v; want the (partial) list", err)
	}
	if gateway.WarmForTest(warming) {
		t.Fatal("a one-minute warm-up ended during the checks")
	}
	// Once warm, the same listing is empty and OK.
	warm, grpcc := start(100 * time.Millisecond)
	waitFor(t, "warm", func() bool { return gateway.WarmForTest(warm) })
	resp, err := grpcc.ListTools(ctx, &toolfleetv1.ListToolsRequest{Filter: "KV.*"})
	if err != nil || len(resp.GetTools()) != 0 {
		t.Errorf("ListTools KV.* once warm: %v, %v; want an empty list", resp, err)
	}
}
