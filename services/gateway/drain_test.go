package gateway_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/internal/natsx/natstest"
	"github.com/toolfleet/toolfleet/services/gateway"
)

// TestDrainingRefusalMovesToAnotherReplica: a replica that refuses a call with
// UNAVAILABLE and the draining trailer did not run it, so the gateway moves the
// call to the next replica, whatever the tool; the same refusal without the
// trailer may have run and is not moved (the caller retries by its policy).
func TestDrainingRefusalMovesToAnotherReplica(t *testing.T) {
	t.Parallel()
	a, b := startPlainCalculator(t, 2, withSideEffects()), startPlainCalculator(t, 2, withSideEffects())
	g := startGateway(t, gateway.Config{Workers: []string{a.addr, b.addr}, Auth: gateway.AuthConfig{Disabled: true}})
	waitFor(t, "both replicas", func() bool { return gateway.ReplicasForTest(g, "Calculator.Add@2.0.0") == 2 })
	// Warm both connections: the trailer matters on a ready one.
	for a.adds.Load() == 0 || b.adds.Load() == 0 {
		if _, err := g.Call(t.Context(), anon(), &toolfleetv1.CallToolRequest{ToolId: "Calculator.Add@2", Input: addInput(1, 1)}); err != nil {
			t.Fatal(err)
		}
	}
	a.draining.Store(true)
	before := b.adds.Load()
	for i := range 10 {
		resp, err := g.Call(t.Context(), anon(), &toolfleetv1.CallToolRequest{ToolId: "Calculator.Add@2", Input: addInput(1, 1)})
		if err != nil || !resp.GetSuccess() {
			t.Fatalf("call %d with a draining: %v %v; want it moved to b", i, resp, err)
		}
	}
	if got := b.adds.Load() - before; got != 10 {
		t.Fatalf("b ran %d of 10 calls; want all", got)
	}

	// Control: UNAVAILABLE without the trailer on a ready connection is not moved.
	a.draining.Store(false)
	unavailable := func(float64) error { return status.Error(codes.Unavailable, "overloaded") }
	a.onAdd.Store(&unavailable)
	failed := 0
	for range 10 {
		if _, err := g.Call(t.Context(), anon(), &toolfleetv1.CallToolRequest{ToolId: "Calculator.Add@2", Input: addInput(1, 1)}); gateway.CodeOf(err) == codes.Unavailable {
			failed++
		}
	}
	if failed == 0 {
		t.Fatal("no call failed while a answered UNAVAILABLE without the trailer; want those calls to fail (not moved)")
	}
}

// TestWorkerLeavesPolitely: of two sdk/tool replicas announced on NATS, one is
// stopped under traffic and no call fails; when the last one stops, its tools
// stay known and calls get a retryable Unavailable until its ttl runs out,
// then the tool is gone (NotFound).
func TestWorkerLeavesPolitely(t *testing.T) {
	t.Parallel()
	nats := natstest.Start(t)
	ca, _, stopA := calculatorWorker(t, nats.URL())
	cb, _, stopB := calculatorWorker(t, nats.URL())
	g := startGateway(t, gateway.Config{NATSURL: nats.URL(), AnnounceSweep: 20 * time.Millisecond, Auth: gateway.AuthConfig{Disabled: true}})
	waitFor(t, "both replicas", func() bool { return gateway.ReplicasForTest(g, "Calculator.Add@1.0.0") == 2 })

	call := func(ctx context.Context) error {
		resp, err := g.Call(ctx, anon(), &toolfleetv1.CallToolRequest{ToolId: "Calculator.Add", Input: addInput(1, 2)})
		if err == nil && !resp.GetSuccess() {
			err = errors.New(resp.GetError().GetMessage())
		}
		return err
	}
	ctx, cancel := context.WithCancel(t.Context())
	var calls, failures atomic.Int64
	var first atomic.Value
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				err := call(ctx)
				if ctx.Err() != nil {
					return
				}
				calls.Add(1)
				if err != nil {
					failures.Add(1)
					first.CompareAndSwap(nil, err.Error())
				}
			}
		})
	}
	time.Sleep(200 * time.Millisecond)
	stopA()
	afterA := ca.adds.Load()
	time.Sleep(300 * time.Millisecond)
	cancel()
	wg.Wait()
	if failures.Load() != 0 || calls.Load() < 10 {
		t.Fatalf("%d of %d calls failed while one of two replicas left (first: %v)", failures.Load(), calls.Load(), first.Load())
	}
	if ca.adds.Load() != afterA || cb.adds.Load() == 0 {
		t.Fatalf("calls reached the stopped replica (%d after it stopped) or never the other (%d)", ca.adds.Load()-afterA, cb.adds.Load())
	}

	stopB()
	if err := call(t.Context()); gateway.CodeOf(err) != codes.Unavailable {
		t.Fatalf("a call right after the last replica left: %v; want Unavailable (retryable), the tool still known", err)
	}
	waitFor(t, "the tool to go once the ttl ran out", func() bool {
		_, err := g.GetTool(&toolfleetv1.GetToolRequest{ToolId: "Calculator.Add@1"})
		return err != nil
	})
	if err := call(t.Context()); gateway.CodeOf(err) != codes.NotFound {
		t.Fatalf("a call after the ttl: %v; want NotFound", err)
	}
}

// TestLeavingReplicaMakesWayForNewContract: while the only replica of
// Calculator@1.0.0 is leaving, a worker with a changed contract of the same
// version (a restart during development) is accepted, not refused by the trust
// rule, and takes the calls; the leaving replica goes at once.
func TestLeavingReplicaMakesWayForNewContract(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	_, _, stopOld := calculatorWorker(t, srv.URL())
	g := startGateway(t, gateway.Config{NATSURL: srv.URL(), Auth: gateway.AuthConfig{Disabled: true}})
	waitTool(t, g, "Calculator.Add@1.0.0")
	stopOld() // DRAINING, then NOT_SERVING: its tools stay known for its ttl

	const desc = "Add two numbers (the edited contract)."
	edited := startPlainCalculator(t, 1, func(o *toolfleetv1.ToolOptions) { o.Description = desc })
	announce(t, srv.URL(), edited.addr)
	waitFor(t, "the edited contract to replace the leaving one", func() bool {
		d, err := g.GetTool(&toolfleetv1.GetToolRequest{ToolId: "Calculator.Add@1.0.0"})
		return err == nil && d.GetTool().GetDescription() == desc
	})
	if n := gateway.ReplicasForTest(g, "Calculator.Add@1.0.0"); n != 1 {
		t.Fatalf("%d replicas of Calculator.Add@1.0.0; want the edited one only", n)
	}
	if r, err := g.Call(t.Context(), anon(), &toolfleetv1.CallToolRequest{ToolId: "Calculator.Add", Input: addInput(1, 2)}); err != nil || !r.GetSuccess() || edited.adds.Load() != 1 {
		t.Fatalf("a call after the replacement: %v %v (edited replica ran %d); want it on the edited replica", r, err, edited.adds.Load())
	}
}
