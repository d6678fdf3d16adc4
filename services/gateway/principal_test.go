package gateway_test

import (
	"testing"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/services/gateway"
)

// TestWorkerReceivesPrincipal: the worker sees who the call is for, and on a
// delegated call the delegate too (tool.Principal), whatever the caller sent.
func TestWorkerReceivesPrincipal(t *testing.T) {
	t.Parallel()
	c, addr, _ := calculatorWorker(t, "")
	g := startGateway(t, gateway.Config{Workers: []string{addr}})
	waitTool(t, g, "Calculator.Add")
	for _, tc := range []struct {
		name string
		p    *gateway.Principal
		want string
	}{
		{"direct", &gateway.Principal{Subject: "ana", Scopes: []string{"tools:call"}}, "ana "},
		{"delegated", &gateway.Principal{Subject: "ana", Scopes: []string{"tools:call"}, Via: &gateway.Principal{Subject: "report-bot", Scopes: []string{"tools:call"}}}, "ana report-bot"},
		{"anonymous", &gateway.Principal{Anonymous: true}, "anonymous "},
		// gRPC metadata is printable ASCII: any subject still arrives intact.
		{"any subject", &gateway.Principal{Subject: "José Ñ 100% <x@y>\n", Scopes: []string{"tools:call"}}, "José Ñ 100% <x@y>\n "},
	} {
		r, err := g.Call(t.Context(), tc.p, &toolfleetv1.CallToolRequest{ToolId: "Calculator.Add", Input: addInput(1, 2)})
		if err != nil || !r.GetSuccess() {
			t.Fatalf("%s: %v %v", tc.name, r, err)
		}
		if got, _ := c.principal.Load().(string); got != tc.want {
			t.Errorf("%s: the worker saw principal %q; want %q", tc.name, got, tc.want)
		}
	}
}
