package gateway_test

import (
	"net"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/internal/natsx/natstest"
	"github.com/toolfleet/toolfleet/services/gateway"
)

func addInput(a, b float64) *structpb.Struct {
	s, _ := structpb.NewStruct(map[string]any{"a": a, "b": b})
	return s
}

func anon() *gateway.Principal { return &gateway.Principal{Anonymous: true} }

// TestRegistryStaticAndAnnounced: a static worker and an announced one both
// serve; the announced one expires once it stops announcing.
func TestRegistryStaticAndAnnounced(t *testing.T) {
	t.Parallel()
	nats := natstest.Start(t)
	static := startPlainCalculator(t, 2)
	_, _, stopAnnounced := calculatorWorker(t, nats.URL())
	g := startGateway(t, gateway.Config{Workers: []string{static.addr}, NATSURL: nats.URL(), AnnounceSweep: 50 * time.Millisecond})
	waitTool(t, g, "Calculator.Add@1.0.0")
	waitTool(t, g, "Calculator.Add@2.0.0")

	stopAnnounced()
	waitFor(t, "the stopped worker to leave", func() bool {
		_, err := g.GetTool(&toolfleetv1.GetToolRequest{ToolId: "Calculator.Add@1"})
		return err != nil
	})
	// The static worker stays.
	if _, err := g.GetTool(&toolfleetv1.GetToolRequest{ToolId: "Calculator.Add@2"}); err != nil {
		t.Fatalf("static worker gone: %v", err)
	}
}

// TestRegistryVersionsAndNames: several versions at once; @x.y.z exact, @x = x.0.0,
// none = latest, model-facing name accepted.
func TestRegistryVersionsAndNames(t *testing.T) {
	t.Parallel()
	_, v1, _ := calculatorWorker(t, "")
	v2 := startPlainCalculator(t, 2)
	v3 := startPlainCalculator(t, 3)
	g := startGateway(t, gateway.Config{Workers: []string{v1, v2.addr, v3.addr}})
	waitTool(t, g, "Calculator.Add@3.0.0")
	waitTool(t, g, "Calculator.Add@1.0.0")
	waitTool(t, g, "Calculator.Add@2.0.0")
	for _, tc := range []struct{ ref, want string }{
		{"Calculator.Add@1.0.0", "Calculator.Add@1.0.0"},
		{"Calculator.Add@2", "Calculator.Add@2.0.0"},
		{"Calculator.Add", "Calculator.Add@3.0.0"},
		{"Calculator_Add", "Calculator.Add@3.0.0"},
		{"Calculator_Add@1", "Calculator.Add@1.0.0"},
	} {
		t.Run(tc.ref, func(t *testing.T) {
			t.Parallel()
			resp, err := g.Call(t.Context(), anon(), &toolfleetv1.CallToolRequest{ToolId: tc.ref, Input: addInput(2, 3)})
			if err != nil {
				t.Fatalf("Call: %v", err)
			}
			if resp.GetToolId() != tc.want || resp.GetValue().GetStructValue().GetFields()["result"].GetNumberValue() != 5 {
				t.Fatalf("got %s %v, want %s result 5", resp.GetToolId(), resp.GetValue(), tc.want)
			}
		})
	}
}

// TestRegistryBalancesReplicas: calls spread over two replicas of one version,
// and when one is killed the calls go to the other.
func TestRegistryBalancesReplicas(t *testing.T) {
	t.Parallel()
	a, b := startPlainCalculator(t, 2), startPlainCalculator(t, 2)
	g := startGateway(t, gateway.Config{Workers: []string{a.addr, b.addr}})
	waitTool(t, g, "Calculator.Add@2")
	waitFor(t, "both replicas", func() bool {
		resp, _ := g.ListTools(&toolfleetv1.ListToolsRequest{})
		return resp != nil && len(resp.GetTools()) > 0 && replicas(g) == 2
	})
	call := func() {
		t.Helper()
		resp, err := g.Call(t.Context(), anon(), &toolfleetv1.CallToolRequest{ToolId: "Calculator.Add@2", Input: addInput(1, 1)})
		if err != nil || !resp.GetSuccess() {
			t.Fatalf("Call: %v %v", resp, err)
		}
	}
	for range 10 {
		call()
	}
	if a.adds.Load() == 0 || b.adds.Load() == 0 || a.adds.Load()+b.adds.Load() != 10 {
		t.Fatalf("calls not balanced: %d and %d", a.adds.Load(), b.adds.Load())
	}
	a.kill()
	// The gateway makes one attempt: a call sent on a's connection before the
	// gateway saw it close may have reached a, so it fails (Unavailable) instead of
	// moving on; a call that cannot reach a at all moves to b. One such failure at
	// most, then every call goes to b.
	for i := 0; ; i++ {
		_, err := g.Call(t.Context(), anon(), &toolfleetv1.CallToolRequest{ToolId: "Calculator.Add@2", Input: addInput(1, 1)})
		if err == nil {
			break
		}
		if gateway.CodeOf(err) != codes.Unavailable || i > 0 {
			t.Fatalf("call %d after the kill: %v, want at most one Unavailable", i, err)
		}
	}
	before := b.adds.Load()
	for range 10 {
		call()
	}
	if got := b.adds.Load() - before; got != 10 {
		t.Fatalf("the surviving replica got %d of 10 calls", got)
	}
}

func replicas(g *gateway.Gateway) int { return gateway.ReplicasForTest(g, "Calculator.Add@2.0.0") }

// TestRegistryStaticWorkerStartsLater: a static worker that is not up when the
// gateway starts joins once it is.
func TestRegistryStaticWorkerStartsLater(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	g := startGateway(t, gateway.Config{Workers: []string{addr}})
	if _, err := g.Call(t.Context(), anon(), &toolfleetv1.CallToolRequest{ToolId: "Calculator.Add@7", Input: addInput(1, 2)}); gateway.CodeOf(err) != codes.NotFound {
		t.Fatalf("before the worker is up: %v, want NotFound", err)
	}
	startPlainCalculatorAt(t, addr, 7)
	waitTool(t, g, "Calculator.Add@7")
	if r, err := g.Call(t.Context(), anon(), &toolfleetv1.CallToolRequest{ToolId: "Calculator.Add@7", Input: addInput(1, 2)}); err != nil || !r.GetSuccess() {
		t.Fatalf("after: %v %v", r, err)
	}
}

// TestWorkerReceivesCallID: the worker sees the call's id in its metadata.
func TestWorkerReceivesCallID(t *testing.T) {
	t.Parallel()
	g := startGateway(t, gateway.Config{Workers: []string{schemaTestWorker(t, "")}})
	waitTool(t, g, "SchemaTest.Panic")
	r, err := g.Call(t.Context(), anon(), &toolfleetv1.CallToolRequest{CallId: "call-42", ToolId: "SchemaTest.Panic", Input: &structpb.Struct{}})
	if err != nil || r.GetValue().GetStructValue().GetFields()["callId"].GetStringValue() != "call-42" {
		t.Fatalf("got %v %v, want the worker to echo call-42", r, err)
	}
}
