package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	schematestv1 "github.com/toolfleet/toolfleet/gen/tools/schematest/v1"
	"github.com/toolfleet/toolfleet/internal/natsx/natstest"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/sdk/tool/journal"
	"github.com/toolfleet/toolfleet/sdk/tool/tooltest"
	"github.com/toolfleet/toolfleet/services/gateway"
)

// BenchmarkJournaledCall measures the call journal (docs/gateway.md, "Exactly
// once"): SchemaTest.Sleep with a zero duration, a tool with neither the
// read_only nor the idempotent hint, served by an sdk/tool worker, at 1 and 64
// concurrent callers, four ways in the same run:
//
//   - direct: grpc-go client → the journaling worker (the baseline);
//   - no-call-id: the full gateway, no call_id (nothing stored, events only);
//   - unjournaled: the full gateway with caller call_ids, the same service on a
//     worker without NATS listed as a static worker: the gateway's lock (one
//     round trip) and its stored response R, whose ack it waits for;
//   - journaled: the full gateway with caller call_ids on the worker with NATS,
//     which announces call_journal: the lock, the worker's S before the tool
//     and F after it (two round trips the worker waits for), and R published
//     without waiting.
//
// The unjournaled side's gateway has a NATS server of its own, so that it
// does not also route to the journaling worker through its announcements.
// It reports journaled÷no-call-id and journaled÷unjournaled for throughput,
// p50 latency and CPU per call (client, gateways, workers and NATS share the
// process), the journaled side's throughput ratio to direct, and logs each
// side's latency, CPU and allocations per call. The run checks that every
// journaled call, and no other, reached the worker with a claim.
//
//	go test ./bench -run '^$' -bench JournaledCall -benchtime 3000x
func BenchmarkJournaledCall(b *testing.B) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	nats, nats2 := natstest.Start(b), natstest.Start(b)
	// claims counts the requests that reach the journaling worker with a
	// claim (journaled calls); stray the claims the other worker gets (none).
	var claims, stray atomic.Int64
	countClaims := func(n *atomic.Int64) grpc.ServerOption {
		return grpc.InTapHandle(func(ctx context.Context, info *tap.Info) (context.Context, error) {
			if len(info.Header.Get(journal.ClaimKey)) > 0 {
				n.Add(1)
			}
			return ctx, nil
		})
	}
	svc := &benchSideEffect{}
	register := func(w *tool.Worker) { schematestv1.RegisterSchemaTestServiceServer(w, svc) }
	journaled, _ := tooltest.Start(b, tool.Config{Name: "journaled", NATSURL: nats.URL(),
		ServerOptions: []grpc.ServerOption{countClaims(&claims)}}, register)
	plain, _ := tooltest.Start(b, tool.Config{Name: "plain",
		ServerOptions: []grpc.ServerOption{countClaims(&stray)}}, register)

	secret := []byte("bench-secret-bench-secret-bench-secret")
	const toolID = "SchemaTest.Sleep"
	// g finds the journaling worker through its announcements; g2 knows only
	// the static worker without NATS.
	g := startBenchGatewayFor(b, gateway.Config{NATSURL: nats.URL(), Logger: quiet}, secret, toolID)
	g2 := startBenchGatewayFor(b, gateway.Config{Workers: []string{plain.Addr()}, NATSURL: nats2.URL(), Logger: quiet}, secret, toolID)
	direct := schematestv1.NewSchemaTestServiceClient(tooltest.Dial(b, journaled.Addr()))
	gw := toolfleetv1.NewToolGatewayServiceClient(tooltest.Dial(b, g.Addr()))
	gw2 := toolfleetv1.NewToolGatewayServiceClient(tooltest.Dial(b, g2.Addr()))
	authCtx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+benchToken(b, secret))
	input := &structpb.Struct{} // a zero duration
	var seq atomic.Int64
	gwCall := func(c toolfleetv1.ToolGatewayServiceClient, callerID bool) error {
		req := &toolfleetv1.CallToolRequest{ToolId: toolID, Input: input}
		if callerID {
			req.CallId = fmt.Sprintf("bench-journal-%d", seq.Add(1))
		}
		resp, err := c.CallTool(authCtx, req)
		if err == nil && !resp.GetSuccess() {
			err = fmt.Errorf("call failed: %v", resp.GetError())
		}
		return err
	}
	sides := []side{
		{name: "direct", call: func() error {
			_, err := direct.Sleep(context.Background(), &schematestv1.SleepRequest{})
			return err
		}},
		{name: "no-call-id", call: func() error { return gwCall(gw, false) }},
		{name: "unjournaled-call-id", call: func() error { return gwCall(gw2, true) }},
		{name: "journaled", call: func() error { return gwCall(gw, true) }},
	}
	// Until the idempotency buckets exist, a call with a call_id is refused
	// as unavailable: wait for both gateways' stores, and warm every side.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if gwCall(gw, true) == nil && gwCall(gw2, true) == nil {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("the gateways' idempotency stores never answered")
		}
	}
	for _, s := range sides {
		for range 50 {
			if err := s.call(); err != nil {
				b.Fatalf("%s: %v", s.name, err)
			}
		}
	}
	for _, conc := range []int{1, 64} {
		b.Run(fmt.Sprintf("callers=%d", conc), func(b *testing.B) {
			before := claims.Load()
			res := measure(b, conc, b.N, sides)
			if n := claims.Load() - before; n != int64(b.N) {
				b.Fatalf("%d calls reached the worker with a claim, want %d (one per journaled call)", n, b.N)
			}
			if n := stray.Load(); n != 0 {
				b.Fatalf("the worker without NATS got %d claims", n)
			}
			base, noID, unj, jr := res[0], res[1], res[2], res[3]
			b.ReportMetric(base.tput, "direct-calls/s")
			b.ReportMetric(jr.tput, "journaled-calls/s")
			b.ReportMetric(jr.tput/base.tput, "throughput-ratio")
			b.ReportMetric(jr.tput/noID.tput, "journaled÷no-call-id")
			b.ReportMetric(jr.tput/unj.tput, "journaled÷unjournaled")
			b.ReportMetric(float64(jr.p(0.5))/float64(noID.p(0.5)), "p50-journaled÷no-call-id")
			b.ReportMetric(float64(jr.p(0.5))/float64(unj.p(0.5)), "p50-journaled÷unjournaled")
			b.ReportMetric(float64(jr.cpu)/float64(noID.cpu), "cpu-journaled÷no-call-id")
			b.ReportMetric(float64(jr.cpu)/float64(unj.cpu), "cpu-journaled÷unjournaled")
			// What the journal adds to a call with a call_id, in absolute terms.
			b.ReportMetric(float64(jr.p(0.5)-unj.p(0.5))/1e3, "journal-p50-µs")
			b.ReportMetric(float64(jr.cpu-unj.cpu)/1e3, "journal-cpu-µs")
			for _, r := range res {
				b.Logf("callers=%d n=%d %-20s %8.0f calls/s (%.2f×) p50=%-10s p99=%-10s cpu/call=%-9s allocs/call=%d",
					conc, b.N, r.name, r.tput, r.tput/base.tput, r.p(0.5), r.p(0.99), r.cpu.Round(time.Microsecond), r.mem)
			}
		})
	}
}

// benchSideEffect serves SchemaTest.Sleep, which has neither the read_only
// nor the idempotent hint: a call with a call_id is journaled. It does not
// sleep.
type benchSideEffect struct {
	schematestv1.UnimplementedSchemaTestServiceServer
}

func (*benchSideEffect) Sleep(context.Context, *schematestv1.SleepRequest) (*schematestv1.SleepResponse, error) {
	return &schematestv1.SleepResponse{Slept: true}, nil
}
