package gateway_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/grpc/metadata"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	calculatorv1 "github.com/toolfleet/toolfleet/gen/tools/calculator/v1"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/services/gateway"
	"github.com/toolfleet/toolfleet/workers/calculator/calculator"
)

// tracedCalculator records the traceparent each Add arrived with.
type tracedCalculator struct {
	*calculator.Service
	mu   sync.Mutex
	seen []string
}

func (c *tracedCalculator) Add(ctx context.Context, req *calculatorv1.AddRequest) (*calculatorv1.AddResponse, error) {
	c.mu.Lock()
	c.seen = append(c.seen, tool.TraceParent(ctx))
	c.mu.Unlock()
	return c.Service.Add(ctx, req)
}

// The caller's W3C traceparent reaches the worker unchanged through a
// gateway that records no spans, on gRPC and on Connect; without one the
// request's trace_id still starts a trace.
func TestCallerTraceParent(t *testing.T) {
	t.Parallel()
	calc := &tracedCalculator{Service: calculator.New()}
	w, stop := startWorker(t, "", func(w *tool.Worker) { calculatorv1.RegisterCalculatorServiceServer(w, calc) })
	defer stop()
	g := startGateway(t, gateway.Config{Workers: []string{w.Addr()}, Auth: gateway.AuthConfig{Disabled: true}})
	waitTool(t, g, "Calculator.Add")

	const grpcParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ctx := metadata.AppendToOutgoingContext(t.Context(), "traceparent", grpcParent)
	if _, err := grpcClient(t, g.Addr()).CallTool(ctx, &toolfleetv1.CallToolRequest{ToolId: "Calculator.Add", Input: addInput(1, 2)}); err != nil {
		t.Fatal(err)
	}
	const connectParent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	req := connect.NewRequest(&toolfleetv1.CallToolRequest{ToolId: "Calculator.Add", Input: addInput(1, 2)})
	req.Header().Set("traceparent", connectParent)
	if _, err := connectClient(g.Addr()).CallTool(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	const traceID = "5bf92f3577b34da6a3ce929d0e0e4737"
	if _, err := grpcClient(t, g.Addr()).CallTool(t.Context(), &toolfleetv1.CallToolRequest{ToolId: "Calculator.Add", Input: addInput(1, 2), TraceId: traceID}); err != nil {
		t.Fatal(err)
	}
	calc.mu.Lock()
	defer calc.mu.Unlock()
	if len(calc.seen) != 3 || calc.seen[0] != grpcParent || calc.seen[1] != connectParent || !strings.HasPrefix(calc.seen[2], "00-"+traceID+"-") {
		t.Errorf("the worker saw traceparents %q, want %q, %q and one in trace %s", calc.seen, grpcParent, connectParent, traceID)
	}
}
