package gateway_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	calculatorv1 "github.com/toolfleet/toolfleet/gen/tools/calculator/v1"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/services/gateway"
	"github.com/toolfleet/toolfleet/workers/calculator/calculator"
)

// loudCalculator's Add answers with a trailer of trailerBytes when a is 1:
// a worker that sends the gateway more than it should.
type loudCalculator struct {
	*calculator.Service
	trailerBytes int
}

func (c *loudCalculator) Add(ctx context.Context, req *calculatorv1.AddRequest) (*calculatorv1.AddResponse, error) {
	if req.GetA() == 1 {
		_ = grpc.SetTrailer(ctx, metadata.Pairs("x-loud-bin", strings.Repeat("x", c.trailerBytes)))
	}
	return c.Service.Add(ctx, req)
}

// TestWorkerTrailerBounded: a worker's trailer over the gateway's bound for
// what a worker sends (4 MiB) fails that call, as an error and never a
// success, without the gateway holding the megabytes; the same worker's next
// call, and the gateway, serve on. A trailer within the bound passes.
func TestWorkerTrailerBounded(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		bytes int
		ok    bool
	}{{"over the bound", 6 << 20, false}, {"within it", 256 << 10, true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w, _ := startWorker(t, "", func(w *tool.Worker) {
				calculatorv1.RegisterCalculatorServiceServer(w, &loudCalculator{Service: calculator.New(), trailerBytes: tc.bytes})
			})
			g := startGateway(t, gateway.Config{Workers: []string{w.Addr()}, Auth: gateway.AuthConfig{Disabled: true}})
			waitTool(t, g, "Calculator.Add")
			resp, err := g.Call(t.Context(), anon(), &toolfleetv1.CallToolRequest{ToolId: "Calculator.Add", Input: addInput(1, 2)})
			if got := err == nil && resp.GetSuccess(); got != tc.ok {
				t.Fatalf("a %d-byte trailer: %v %v; want success %v", tc.bytes, resp, err, tc.ok)
			}
			resp, err = g.Call(t.Context(), anon(), &toolfleetv1.CallToolRequest{ToolId: "Calculator.Add", Input: addInput(2, 2)})
			if err != nil || !resp.GetSuccess() {
				t.Fatalf("the next call: %v %v", resp, err)
			}
		})
	}
}
