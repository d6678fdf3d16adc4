package gateway_test

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/internal/natsx/natstest"
	"github.com/toolfleet/toolfleet/sdk/jsassets"
	"github.com/toolfleet/toolfleet/services/gateway"
	"github.com/toolfleet/toolfleet/services/gateway/idempotency"
)

// TestIdempotency: a repeated call_id runs the tool once (finished or in flight,
// on one gateway or across two replicas); retryable failures are not stored.
func TestIdempotency(t *testing.T) {
	t.Parallel()
	nats := natstest.Start(t)
	calc, calcAddr, _ := calculatorWorker(t, "")
	stAddr, st := countingSchemaTestWorker(t, "")
	cfg := gateway.Config{NATSURL: nats.URL(), Workers: []string{calcAddr, stAddr}}
	g1, g2 := startGateway(t, cfg), startGateway(t, cfg)
	for _, g := range []*gateway.Gateway{g1, g2} {
		waitTool(t, g, "Calculator.Add")
		waitTool(t, g, "SchemaTest.Types")
	}
	p := &gateway.Principal{Anonymous: true}
	call := func(g *gateway.Gateway, callID, tool string, in *structpb.Struct) (*toolfleetv1.CallToolResponse, error) {
		return g.Call(t.Context(), p, &toolfleetv1.CallToolRequest{CallId: callID, ToolId: tool, Input: in, Approval: testApproval})
	}
	typesIn := func(s string) *structpb.Struct { return mustStruct(t, map[string]any{"s": s}) }

	t.Run("finished call on one gateway", func(t *testing.T) {
		before := calc.adds.Load()
		r1, err := call(g1, "same-1", "Calculator.Add", addInput(2, 3))
		if err != nil {
			t.Fatal(err)
		}
		r2, err := call(g1, "same-1", "Calculator.Add", addInput(2, 3))
		if err != nil {
			t.Fatal(err)
		}
		if n := calc.adds.Load() - before; n != 1 {
			t.Fatalf("tool ran %d times, want 1", n)
		}
		if !proto.Equal(r1, r2) {
			t.Fatalf("repeat answered %v, want the stored %v", r2, r1)
		}
	})
	t.Run("finished call across replicas", func(t *testing.T) {
		before := calc.adds.Load()
		for _, g := range []*gateway.Gateway{g1, g2, g1, g2} {
			if _, err := call(g, "same-2", "Calculator.Add", addInput(1, 1)); err != nil {
				t.Fatal(err)
			}
		}
		if n := calc.adds.Load() - before; n != 1 {
			t.Fatalf("tool ran %d times, want 1", n)
		}
	})
	t.Run("in-flight call across replicas", func(t *testing.T) {
		before := calc.adds.Load()
		var wg sync.WaitGroup
		results := make([]*toolfleetv1.CallToolResponse, 6)
		for i := range results {
			g := []*gateway.Gateway{g1, g2}[i%2]
			wg.Go(func() {
				r, err := call(g, "slow-1", "Calculator.Add", addInput(slowA, 1))
				if err != nil {
					t.Errorf("call %d: %v", i, err)
				}
				results[i] = r
			})
		}
		wg.Wait()
		if n := calc.adds.Load() - before; n != 1 {
			t.Fatalf("tool ran %d times, want 1", n)
		}
		for _, r := range results {
			if r.GetValue().GetStructValue().GetFields()["result"].GetNumberValue() != slowA+1 {
				t.Fatalf("result %v, want %d", r, slowA+1)
			}
		}
	})
	t.Run("retryable failure runs again", func(t *testing.T) {
		before := st.types.Load()
		for range 2 {
			r, err := call(g1, "retry-1", "SchemaTest.Types", typesIn("retry"))
			if err != nil || r.GetSuccess() || !r.GetError().GetCanRetry() {
				t.Fatalf("got %v %v, want a retryable execution error", r, err)
			}
		}
		if n := st.types.Load() - before; n != 2 {
			t.Fatalf("tool ran %d times, want 2", n)
		}
	})
	t.Run("final failure is stored", func(t *testing.T) {
		before := st.types.Load()
		for _, g := range []*gateway.Gateway{g1, g2} {
			r, err := call(g, "fail-1", "SchemaTest.Types", typesIn("fail"))
			if err != nil || r.GetSuccess() {
				t.Fatalf("got %v %v, want an execution error", r, err)
			}
		}
		if n := st.types.Load() - before; n != 1 {
			t.Fatalf("tool ran %d times, want 1", n)
		}
	})
	t.Run("validation failure is not stored", func(t *testing.T) {
		if _, err := call(g1, "bad-1", "Calculator.Add", mustStruct(t, map[string]any{"x": 1})); gateway.CodeOf(err) != codes.InvalidArgument {
			t.Fatalf("err = %v, want InvalidArgument", err)
		}
		if r, err := call(g2, "bad-1", "Calculator.Add", addInput(1, 2)); err != nil || !r.GetSuccess() {
			t.Fatalf("got %v %v, want the corrected call to run", r, err)
		}
	})
	t.Run("same call_id with other input is a conflict that runs nothing", func(t *testing.T) {
		if _, err := call(g1, "conflict-1", "Calculator.Add", addInput(1, 2)); err != nil {
			t.Fatal(err)
		}
		before := calc.adds.Load()
		for _, g := range []*gateway.Gateway{g1, g2} {
			_, err := call(g, "conflict-1", "Calculator.Add", addInput(50, 50))
			if gateway.CodeOf(err) != codes.AlreadyExists || !strings.Contains(err.Error(), "another input") {
				t.Fatalf("err = %v, want AlreadyExists saying another input", err)
			}
		}
		if n := calc.adds.Load() - before; n != 0 {
			t.Fatalf("tool ran %d times, want 0", n)
		}
	})
	t.Run("in-flight call with other input is a conflict once it finishes", func(t *testing.T) {
		before := calc.adds.Load()
		var wg sync.WaitGroup
		wg.Go(func() {
			if _, err := call(g1, "conflict-slow", "Calculator.Add", addInput(slowA, 1)); err != nil {
				t.Errorf("first: %v", err)
			}
		})
		waitFor(t, "the slow call to start", func() bool { return calc.adds.Load() > before })
		if _, err := call(g2, "conflict-slow", "Calculator.Add", addInput(1, 1)); gateway.CodeOf(err) != codes.AlreadyExists {
			t.Errorf("err = %v, want AlreadyExists", err)
		}
		wg.Wait()
		if n := calc.adds.Load() - before; n != 1 {
			t.Fatalf("tool ran %d times, want 1", n)
		}
	})
	t.Run("two principals with one call_id run twice", func(t *testing.T) {
		before := calc.adds.Load()
		ana, bo := &gateway.Principal{Subject: "ana", Anonymous: true}, &gateway.Principal{Subject: "bo", Anonymous: true}
		ra, err := g1.Call(t.Context(), ana, &toolfleetv1.CallToolRequest{CallId: "shared-1", ToolId: "Calculator.Add", Input: addInput(1, 2)})
		if err != nil {
			t.Fatal(err)
		}
		rb, err := g2.Call(t.Context(), bo, &toolfleetv1.CallToolRequest{CallId: "shared-1", ToolId: "Calculator.Add", Input: addInput(50, 50)})
		if err != nil {
			t.Fatal(err)
		}
		if n := calc.adds.Load() - before; n != 2 {
			t.Fatalf("tool ran %d times, want 2", n)
		}
		if got := rb.GetValue().GetStructValue().GetFields()["result"].GetNumberValue(); got != 100 || proto.Equal(ra, rb) {
			t.Fatalf("the second principal got %v, want its own result 100", rb)
		}
	})
	t.Run("same call_id for another tool is another call", func(t *testing.T) {
		r, err := call(g1, "same-1", "Calculator.Subtract", addInput(2, 3))
		if err != nil || r.GetValue().GetStructValue().GetFields()["result"].GetNumberValue() != -1 {
			t.Fatalf("got %v %v, want Subtract to run", r, err)
		}
	})
	t.Run("without call_id every call runs", func(t *testing.T) {
		before := calc.adds.Load()
		for range 3 {
			r, err := call(g1, "", "Calculator.Add", addInput(2, 3))
			if err != nil || r.GetCallId() == "" {
				t.Fatalf("got %v %v, want a generated call_id", r, err)
			}
		}
		if n := calc.adds.Load() - before; n != 3 {
			t.Fatalf("tool ran %d times, want 3", n)
		}
	})
}

// TestIdempotencyAfterNATSLostItsData: when NATS comes back without the bucket
// (memory storage, or a new server), the gateway makes it again.
func TestIdempotencyAfterNATSLostItsData(t *testing.T) {
	t.Parallel()
	srv, stop := startNATSAt(t, t.TempDir(), 0)
	_, port, _ := net.SplitHostPort(srv.Addr())
	calc, calcAddr, _ := calculatorWorker(t, "")
	g := startGateway(t, gateway.Config{NATSURL: srv.URL(), Workers: []string{calcAddr}})
	waitTool(t, g, "Calculator.Add")
	stop()
	n, _ := strconv.Atoi(port)
	srv, _ = startNATSAt(t, t.TempDir(), n) // a new, empty store
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	call := func() {
		t.Helper()
		if r, err := g.Call(t.Context(), anon(), &toolfleetv1.CallToolRequest{CallId: "after-loss", ToolId: "Calculator.Add", Input: addInput(1, 2)}); err != nil || !r.GetSuccess() {
			t.Fatalf("call: %v %v", r, err)
		}
	}
	waitFor(t, "the bucket to be re-created", func() bool {
		call()
		_, err := js.KeyValue(t.Context(), gateway.DefaultIdempotencyBucket)
		return err == nil
	})
	before := calc.adds.Load()
	call()
	call()
	if n := calc.adds.Load() - before; n > 1 {
		t.Fatalf("tool ran %d times for one call_id, want at most 1", n)
	}
}

// TestIdempotencyGeneratedCallID: a generated call_id stores nothing, so a call
// that names it later runs as a new call (nobody can repeat an id they never
// received, and nobody can fetch another caller's result with it).
func TestIdempotencyGeneratedCallID(t *testing.T) {
	t.Parallel()
	nats := natstest.Start(t)
	calc, calcAddr, _ := calculatorWorker(t, "")
	g := startGateway(t, gateway.Config{NATSURL: nats.URL(), Workers: []string{calcAddr}})
	waitTool(t, g, "Calculator.Add")
	waitStore(t, g)
	first, err := g.Call(t.Context(), anon(), &toolfleetv1.CallToolRequest{ToolId: "Calculator.Add", Input: addInput(1, 2)})
	if err != nil || first.GetCallId() == "" {
		t.Fatalf("first: %v %v", first, err)
	}
	before := calc.adds.Load()
	r, err := g.Call(t.Context(), anon(), &toolfleetv1.CallToolRequest{CallId: first.GetCallId(), ToolId: "Calculator.Add", Input: addInput(5, 5)})
	if err != nil || r.GetValue().GetStructValue().GetFields()["result"].GetNumberValue() != 10 {
		t.Fatalf("got %v %v, want the new input to run", r, err)
	}
	if n := calc.adds.Load() - before; n != 1 {
		t.Fatalf("tool ran %d times, want 1", n)
	}
}

// waitStore waits until the gateway's idempotency store answers: a call_id
// repeated on Calculator.Multiply is answered from the store.
func waitStore(t *testing.T, g *gateway.Gateway) {
	t.Helper()
	i := 0
	waitFor(t, "the idempotency store", func() bool {
		i++
		req := &toolfleetv1.CallToolRequest{CallId: "probe-" + strconv.Itoa(i), ToolId: "Calculator.Multiply@1", Input: addInput(1, 1)}
		r1, err1 := g.Call(t.Context(), anon(), req)
		r2, err2 := g.Call(t.Context(), anon(), req)
		return err1 == nil && err2 == nil && proto.Equal(r1, r2)
	})
}

// TestIdempotencyStoreAway: while the store is unreachable, read-only and
// idempotent tools still run with a call_id; any other tool called with one is
// refused as a retryable server error (Unavailable) without running, and runs
// when called without a call_id.
func TestIdempotencyStoreAway(t *testing.T) {
	t.Parallel()
	srv, stop := startNATSAt(t, t.TempDir(), 0)
	calc, calcAddr, _ := calculatorWorker(t, "")
	sideEffects := startPlainCalculator(t, 2, withSideEffects())
	g := startGateway(t, gateway.Config{NATSURL: srv.URL(), Workers: []string{calcAddr, sideEffects.addr}})
	waitTool(t, g, "Calculator.Add@1")
	waitTool(t, g, "Calculator.Add@2")
	waitStore(t, g)
	stop()
	call := func(callID, tool string) (*toolfleetv1.CallToolResponse, error) {
		return g.Call(t.Context(), anon(), &toolfleetv1.CallToolRequest{CallId: callID, ToolId: tool, Input: addInput(1, 2)})
	}
	before := calc.adds.Load()
	if r, err := call("away-read-only", "Calculator.Add@1"); err != nil || !r.GetSuccess() || calc.adds.Load() != before+1 {
		t.Fatalf("read-only tool: %v %v, want it to run", r, err)
	}
	_, err := call("away-side-effects", "Calculator.Add@2")
	if gateway.CodeOf(err) != codes.Unavailable || !strings.Contains(err.Error(), "idempotency store is unreachable") || sideEffects.adds.Load() != 0 {
		t.Fatalf("side-effecting tool with a call_id: %v (ran %d times), want Unavailable and no run", err, sideEffects.adds.Load())
	}
	if r, err := call("", "Calculator.Add@2"); err != nil || !r.GetSuccess() || sideEffects.adds.Load() != 1 {
		t.Fatalf("side-effecting tool without a call_id: %v %v, want it to run", r, err)
	}
}

// TestIdempotencyBucketBounded: the bucket has a byte bound and a value bound and
// refuses new entries when full (never forgets a finished call); a result over the value bound is not kept,
// and a repeat of its call_id is refused instead of running the tool again.
func TestIdempotencyBucketBounded(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	stAddr, st := countingSchemaTestWorker(t, "")
	_, calcAddr, _ := calculatorWorker(t, "")
	g := startGateway(t, gateway.Config{NATSURL: srv.URL(), Workers: []string{stAddr, calcAddr},
		Idempotency: idempotency.Config{BucketConfig: jsassets.BucketConfig{Bucket: "bounded", MaxBytes: 1 << 20}, MaxValueSize: 512}})
	waitTool(t, g, "SchemaTest.Types")
	waitStore(t, g)

	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	s, err := js.Stream(t.Context(), "KV_bounded")
	if err != nil {
		t.Fatal(err)
	}
	if c := s.CachedInfo().Config; c.MaxBytes != 1<<20 || c.MaxMsgSize != 512 || c.Discard != jetstream.DiscardNew {
		t.Fatalf("bucket: max_bytes %d, max_msg_size %d, discard %v; want 1 MiB, 512, new", c.MaxBytes, c.MaxMsgSize, c.Discard)
	}

	big := mustStruct(t, map[string]any{"s": strings.Repeat("x", 1000)})
	call := func() (*toolfleetv1.CallToolResponse, error) {
		return g.Call(t.Context(), anon(), &toolfleetv1.CallToolRequest{CallId: "big-1", ToolId: "SchemaTest.Types", Input: big, Approval: testApproval})
	}
	if r, err := call(); err != nil || !r.GetSuccess() {
		t.Fatalf("first: %v %v", r, err)
	}
	before := st.types.Load()
	waitFor(t, "the tombstone", func() bool {
		_, err := call()
		return gateway.CodeOf(err) == codes.AlreadyExists && strings.Contains(err.Error(), "too large")
	})
	if n := st.types.Load() - before; n != 0 {
		t.Fatalf("the repeat ran the tool %d times", n)
	}
}

// TestIdempotencyOutcomeUnknown: a side-effecting call whose worker (one without
// a call journal) dies while it has the call may have run: its caller and a
// repeat of its call_id are told so, and it does not run a second time. A
// read-only tool cut the same way runs again: repeating it is harmless.
func TestIdempotencyOutcomeUnknown(t *testing.T) {
	t.Parallel()
	nats := natstest.Start(t)
	for _, tc := range []struct {
		name    string
		major   int
		opts    []func(*toolfleetv1.ToolOptions)
		refused bool
	}{
		{"side effects", 4, []func(*toolfleetv1.ToolOptions){withSideEffects()}, true},
		{"read-only", 5, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dying := startPlainCalculator(t, tc.major, tc.opts...)
			hook := func(float64) error {
				go dying.kill() // the process dies with the call in hand
				time.Sleep(time.Second)
				return nil
			}
			dying.onAdd.Store(&hook)
			_, calcAddr, _ := calculatorWorker(t, "") // for waitStore
			g := startGateway(t, gateway.Config{NATSURL: nats.URL(), Workers: []string{dying.addr, calcAddr}})
			tool := "Calculator.Add@" + strconv.Itoa(tc.major)
			waitTool(t, g, tool)
			waitStore(t, g)
			req := &toolfleetv1.CallToolRequest{CallId: "cut-" + strconv.Itoa(tc.major), ToolId: tool, Input: addInput(1, 2), Approval: testApproval}
			_, err := g.Call(t.Context(), anon(), req)
			switch {
			case tc.refused && (gateway.CodeOf(err) != codes.AlreadyExists || !strings.Contains(err.Error(), "may have run")):
				t.Fatalf("cut call: %v, want AlreadyExists saying the call may have run", err)
			case !tc.refused && gateway.CodeOf(err) != codes.Unavailable:
				t.Fatalf("cut read-only call: %v, want Unavailable", err)
			}
			_, err = g.Call(t.Context(), anon(), req)
			switch {
			case tc.refused && (gateway.CodeOf(err) != codes.AlreadyExists || !strings.Contains(err.Error(), "may have run")):
				t.Fatalf("repeat: %v, want AlreadyExists saying the call may have run", err)
			case !tc.refused && gateway.CodeOf(err) == codes.AlreadyExists:
				t.Fatalf("repeat of a read-only call: %v, want it tried again", err)
			}
			if n := dying.adds.Load(); n != 1 {
				t.Fatalf("tool ran %d times, want 1", n)
			}
		})
	}
}

// TestIdempotencyCallerGoneMidCall: a caller that gives up on a side-effecting
// call (a crashed orchestrator, a client timeout) does not cut it in half: the
// call runs on, its outcome is stored, and the caller's retry receives it.
func TestIdempotencyCallerGoneMidCall(t *testing.T) {
	t.Parallel()
	nats := natstest.Start(t)
	slow := startPlainCalculator(t, 6, withSideEffects())
	hook := func(float64) error { time.Sleep(300 * time.Millisecond); return nil }
	slow.onAdd.Store(&hook)
	_, calcAddr, _ := calculatorWorker(t, "") // for waitStore
	g := startGateway(t, gateway.Config{NATSURL: nats.URL(), Workers: []string{slow.addr, calcAddr}})
	waitTool(t, g, "Calculator.Add@6")
	waitStore(t, g)
	req := &toolfleetv1.CallToolRequest{CallId: "gone-1", ToolId: "Calculator.Add@6", Input: addInput(1, 2), Approval: testApproval}
	ctx, cancel := context.WithCancel(t.Context())
	first := make(chan error, 1)
	go func() { _, err := g.Call(ctx, anon(), req); first <- err }()
	waitFor(t, "the call to reach the tool", func() bool { return slow.adds.Load() == 1 })
	cancel() // the caller is gone; its retry follows at once
	r, err := g.Call(t.Context(), anon(), req)
	if err != nil || r.GetValue().GetStructValue().GetFields()["result"].GetNumberValue() != 3 {
		t.Fatalf("retry: %v %v, want the first call's stored result", r, err)
	}
	if n := slow.adds.Load(); n != 1 {
		t.Fatalf("tool ran %d times, want 1", n)
	}
	<-first
}
