// Package gatewaytest runs a toolkit behind a real gateway for one test: the
// toolkit's worker on a free loopback port (sdk/tool/tooltest) and an
// in-process gateway that routes to it, with auth off. Calls go over gRPC as
// any client's do, so a test sees what callers and models see: JSON input
// converted and checked against the contract's rules before the handler runs,
// execution errors as results, refusals as status errors.
//
//	gw := gatewaytest.Toolkit(t, tool.Config{Name: "weather"}, func(w *tool.Worker) {
//		weatherv1.RegisterWeatherServiceServer(w, weather.New())
//	})
//	res, err := gw.Call(t.Context(), "Weather.Hello", `{"name": "Ada"}`)
//
// It is for tests (toolkits scaffolded by `toolfleet new toolkit` use it);
// the gateway holds no NATS connection, so events and stored calls are off.
package gatewaytest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/sdk/tool/tooltest"
	"github.com/toolfleet/toolfleet/services/gateway"
)

// Timeouts of [Toolkit]: the gateway's start, the wait until it routes to the
// worker, and its stop at the end of the test.
const (
	ReadyTimeout    = 20 * time.Second
	DiscoverTimeout = 20 * time.Second
	StopTimeout     = 30 * time.Second
)

// Gateway is a gateway serving one toolkit worker, stopped when the test ends.
type Gateway struct {
	// Client calls the gateway over gRPC (loopback, no credentials).
	Client toolfleetv1.ToolGatewayServiceClient
	// Gateway is the in-process gateway, e.g. for ListTools.
	Gateway *gateway.Gateway
	// Worker is the toolkit's worker.
	Worker *tool.Worker
}

// Toolkit starts a worker built from cfg, with register adding its services
// (tooltest.Start), and a gateway routing to it; it returns once the gateway
// lists the worker's tools.
func Toolkit(t testing.TB, cfg tool.Config, register func(w *tool.Worker)) *Gateway {
	t.Helper()
	w, _ := tooltest.Start(t, cfg, register)
	g, err := gateway.New(t.Context(), gateway.Config{
		Listen:  "127.0.0.1:0",
		Workers: []string{w.Addr()},
		Auth:    gateway.AuthConfig{Disabled: true},
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatalf("gatewaytest: gateway.New: %v", err)
	}
	Run(t, g)
	// The gateway loads the worker's contract by reflection in the background.
	deadline := time.Now().Add(DiscoverTimeout)
	for {
		l, err := g.ListTools(&toolfleetv1.ListToolsRequest{})
		if err == nil && len(l.GetTools()) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("gatewaytest: the gateway found no tool on the worker within %s (did register add a service with toolfleet options?): %v", DiscoverTimeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return &Gateway{Client: toolfleetv1.NewToolGatewayServiceClient(tooltest.Dial(t, g.Addr())), Gateway: g, Worker: w}
}

// Run runs g (made by gateway.New) until the test ends, and returns once it
// serves: a test fails if it is not ready within ReadyTimeout, or does not
// stop within StopTimeout of the test's end, or Run fails.
func Run(t testing.TB, g *gateway.Gateway) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("gatewaytest: gateway Run: %v", err)
			}
		case <-time.After(StopTimeout):
			t.Errorf("gatewaytest: the gateway did not stop within %s", StopTimeout)
		}
	})
	select {
	case <-g.Ready():
	case err := <-done:
		t.Fatalf("gatewaytest: the gateway stopped before serving: %v", err)
	case <-time.After(ReadyTimeout):
		t.Fatalf("gatewaytest: the gateway was not ready within %s", ReadyTimeout)
	}
}

// WaitTool waits until g serves toolID (it loads workers' contracts in the
// background), failing the test after DiscoverTimeout.
func WaitTool(t testing.TB, g *gateway.Gateway, toolID string) {
	t.Helper()
	deadline := time.Now().Add(DiscoverTimeout)
	for {
		_, err := g.GetTool(&toolfleetv1.GetToolRequest{ToolId: toolID})
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("gatewaytest: the gateway does not serve %s within %s: %v", toolID, DiscoverTimeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// CallOption adjusts the request [Gateway.Call] sends.
type CallOption func(*toolfleetv1.CallToolRequest)

// Approved sends an approval, as a tool with requires_approval needs.
func Approved() CallOption {
	return func(r *toolfleetv1.CallToolRequest) { r.Approval = &toolfleetv1.Approval{Approver: "gatewaytest"} }
}

// WithCallID sends a call id (for idempotency; stored calls are off here, so
// it only reaches the worker).
func WithCallID(id string) CallOption {
	return func(r *toolfleetv1.CallToolRequest) { r.CallId = id }
}

// Call calls the tool toolID ("Toolkit.Tool", optionally "@x.y.z") with input,
// a JSON object, as a model would send it. The tool's own failure is a
// response with success false (res.GetError()); a refusal (unknown tool,
// input that breaks the contract, no approval) is err, a gRPC status.
func (g *Gateway) Call(ctx context.Context, toolID, input string, opts ...CallOption) (*toolfleetv1.CallToolResponse, error) {
	in := &structpb.Struct{}
	if err := protojson.Unmarshal([]byte(input), in); err != nil {
		return nil, fmt.Errorf("gatewaytest: input of %s is not a JSON object: %w", toolID, err)
	}
	req := &toolfleetv1.CallToolRequest{ToolId: toolID, Input: in}
	for _, o := range opts {
		o(req)
	}
	return g.Client.CallTool(ctx, req)
}

// ParameterErrors returns the parameter errors (field path → message) of a
// call refused for its input (InvalidArgument with a ValidationError), or nil
// for any other error or none.
func ParameterErrors(err error) map[string]string {
	st, ok := status.FromError(err)
	if !ok || err == nil || st.Code() != codes.InvalidArgument {
		return nil
	}
	for _, d := range st.Details() {
		if ve, ok := d.(*toolfleetv1.ValidationError); ok {
			return ve.GetParameterErrors()
		}
	}
	return nil
}
