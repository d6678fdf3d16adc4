package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	calculatorv1 "github.com/toolfleet/toolfleet/gen/tools/calculator/v1"
	"github.com/toolfleet/toolfleet/internal/natsx/natstest"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/sdk/tool/tooltest"
	"github.com/toolfleet/toolfleet/services/gateway"
	"github.com/toolfleet/toolfleet/services/gateway/ratelimit"
	"github.com/toolfleet/toolfleet/workers/calculator/calculator"
)

// BenchmarkGatewayCall calls Calculator.Add directly on the worker with grpc-go
// (the baseline) and, in the same run at 1 and 64 concurrent callers, through a
// ladder of extra hops: a bare grpc-go forwarder (the floor of any gateway), the
// gateway without NATS (JWT auth and input validation), the full gateway with
// call ids it generates (nothing stored, call events on JetStream) and the full
// gateway with caller-given call ids (plus the idempotency lock and the stored
// result); and the gateway with generated ids and a rate, a concurrency and a
// byte limit configured but never reached (limits÷no-limits). It reports the
// full gateway's throughput and p50/p99 latency as ratios to direct, every
// rung's throughput ratio, and logs each side's latency, CPU and allocations
// per call.
//
//	go test ./bench -run '^$' -bench GatewayCall -benchtime 20000x
func BenchmarkGatewayCall(b *testing.B) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	nats := natstest.Start(b)
	w, _ := tooltest.Start(b, tool.Config{Name: "calculator"}, func(w *tool.Worker) {
		calculatorv1.RegisterCalculatorServiceServer(w, calculator.New())
	})
	secret := []byte("bench-secret-bench-secret-bench-secret")
	// The full gateway, and one without NATS (no idempotency, no events).
	start := func(natsURL string) *gateway.Gateway {
		return startBenchGateway(b, gateway.Config{Workers: []string{w.Addr()}, NATSURL: natsURL, Logger: quiet}, secret)
	}
	g, lite := start(nats.URL()), start("")
	// The full gateway with every kind of limit configured, none of them
	// reached: what admission costs on the hot path.
	limited := startBenchGateway(b, gateway.Config{Workers: []string{w.Addr()}, NATSURL: nats.URL(), Logger: quiet,
		Limits: ratelimit.Config{Rules: []ratelimit.Rule{{Name: "bench", Rate: 1e6, Burst: 1e6, Concurrent: 10_000,
			Bytes: 1 << 40, Window: ratelimit.Duration(time.Hour)}}}}, secret)
	for deadline := time.Now().Add(20 * time.Second); !limited.LimitsShared(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatal("the limits never reached NATS")
		}
	}
	tok := benchToken(b, secret)
	direct := calculatorv1.NewCalculatorServiceClient(tooltest.Dial(b, w.Addr()))
	hop := calculatorv1.NewCalculatorServiceClient(tooltest.Dial(b, startBareHop(b, w.Addr())))
	gw := toolfleetv1.NewToolGatewayServiceClient(tooltest.Dial(b, g.Addr()))
	gwLite := toolfleetv1.NewToolGatewayServiceClient(tooltest.Dial(b, lite.Addr()))
	gwLimited := toolfleetv1.NewToolGatewayServiceClient(tooltest.Dial(b, limited.Addr()))
	input, _ := structpb.NewStruct(map[string]any{"a": 2, "b": 3})
	authCtx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+tok)
	var seq atomic.Int64
	gwCall := func(c toolfleetv1.ToolGatewayServiceClient, callerID bool) error {
		req := &toolfleetv1.CallToolRequest{ToolId: "Calculator.Add", Input: input}
		if callerID {
			req.CallId = fmt.Sprintf("bench-%d", seq.Add(1))
		}
		resp, err := c.CallTool(authCtx, req)
		if err == nil && !resp.GetSuccess() {
			err = fmt.Errorf("call failed: %v", resp.GetError())
		}
		return err
	}
	add := func(c calculatorv1.CalculatorServiceClient) error {
		_, err := c.Add(context.Background(), &calculatorv1.AddRequest{A: 2, B: 3})
		return err
	}
	// The first side is the baseline; the rest form a ladder from the cheapest
	// possible extra hop to the full gateway, so each step's cost shows.
	sides := []side{
		{name: "direct", call: func() error { return add(direct) }},
		{name: "bare-hop", call: func() error { return add(hop) }},
		{name: "gateway-no-nats", call: func() error { return gwCall(gwLite, true) }},
		{name: "gateway-generated-ids", call: func() error { return gwCall(gw, false) }},
		{name: "gateway-limits", call: func() error { return gwCall(gwLimited, false) }},
		{name: "gateway", call: func() error { return gwCall(gw, true) }},
	}
	for _, conc := range []int{1, 64} {
		b.Run(fmt.Sprintf("callers=%d", conc), func(b *testing.B) {
			res := measure(b, conc, b.N, sides)
			base, full := res[0], res[len(res)-1]
			b.ReportMetric(base.tput, "direct-calls/s")
			b.ReportMetric(full.tput, "gateway-calls/s")
			b.ReportMetric(full.tput/base.tput, "throughput-ratio")
			b.ReportMetric(float64(full.p(0.5))/float64(base.p(0.5)), "p50-ratio")
			b.ReportMetric(float64(full.p(0.99))/float64(base.p(0.99)), "p99-ratio")
			// CPU per call (client, gateway, worker and NATS all run in this process)
			// moves less than throughput when other work shares the machine.
			b.ReportMetric(float64(full.cpu)/float64(base.cpu), "cpu-per-call-ratio")
			for _, r := range res[1 : len(res)-1] {
				b.ReportMetric(r.tput/base.tput, r.name+"-throughput-ratio")
			}
			// The yardstick of issue 14: the full gateway against the bare hop
			// (the floor of any grpc-go gateway), without and with a caller call_id.
			hop := res[1].tput
			b.ReportMetric(res[3].tput/hop, "no-call-id÷bare-hop")
			b.ReportMetric(full.tput/hop, "call-id÷bare-hop")
			// Rate, concurrency and byte limits configured (never reached),
			// against the same gateway without them.
			b.ReportMetric(res[4].tput/res[3].tput, "limits÷no-limits")
			b.ReportMetric(float64(res[4].cpu)/float64(res[3].cpu), "limits-cpu÷no-limits-cpu")
			for _, r := range res {
				b.Logf("callers=%d n=%d %-22s %8.0f calls/s (%.2f×) p50=%-10s p99=%-10s cpu/call=%-9s allocs/call=%d",
					conc, b.N, r.name, r.tput, r.tput/base.tput, r.p(0.5), r.p(0.99), r.cpu.Round(time.Microsecond), r.mem)
			}
		})
	}
}

// startBenchGateway runs a gateway on loopback with HS256 auth for the
// benchmark's life and waits until it serves Calculator.Add.
func startBenchGateway(b *testing.B, cfg gateway.Config, secret []byte) *gateway.Gateway {
	b.Helper()
	return startBenchGatewayFor(b, cfg, secret, "Calculator.Add")
}

// startBenchGatewayFor is startBenchGateway waiting for toolID instead.
func startBenchGatewayFor(b *testing.B, cfg gateway.Config, secret []byte, toolID string) *gateway.Gateway {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cfg.Listen = "127.0.0.1:0"
	cfg.Auth = gateway.AuthConfig{HS256Secret: secret}
	g, err := gateway.New(ctx, cfg)
	if err != nil {
		cancel()
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { _ = g.Run(ctx) })
	b.Cleanup(func() { cancel(); wg.Wait() })
	<-g.Ready()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := g.GetTool(&toolfleetv1.GetToolRequest{ToolId: toolID}); err == nil {
			return g
		}
		if time.Now().After(deadline) {
			b.Fatalf("the gateway did not load %s", toolID)
		}
	}
}

// benchToken is a bearer token with tools:call for an hour.
func benchToken(b *testing.B, secret []byte) string {
	b.Helper()
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "bench", "scope": "tools:call", "exp": time.Now().Add(time.Hour).Unix()}).SignedString(secret)
	if err != nil {
		b.Fatal(err)
	}
	return tok
}

// side is one way of making the benchmark's call.
type side struct {
	name string
	call func() error
}

// result is what measure found for one side.
type result struct {
	name string
	tput float64         // calls per second
	lat  []time.Duration // sorted
	cpu  time.Duration   // process CPU time per call
	mem  uint64          // heap allocations per call (process-wide)
}

func (r result) p(q float64) time.Duration { return r.lat[int(q*float64(len(r.lat)-1))] }

// rounds is how many slices each side's calls are cut into. The sides take
// turns slice by slice, so a change in the machine's load during the run falls
// on every side alike instead of on whichever side ran then.
const rounds = 5

// measure makes n calls per side over conc goroutines, the sides taking turns.
func measure(b *testing.B, conc, n int, sides []side) []result {
	b.Helper()
	res := make([]result, len(sides))
	elapsed := make([]time.Duration, len(sides))
	for r := range rounds {
		chunk := n/rounds + min(1, max(0, n%rounds-r)) // spreads n exactly
		if chunk == 0 {
			continue
		}
		for i, s := range sides {
			allocs := mallocs()
			before, t0 := cpuTime(), time.Now()
			res[i].lat = append(res[i].lat, run(b, conc, chunk, s.call)...)
			elapsed[i] += time.Since(t0)
			res[i].cpu += cpuTime() - before
			res[i].mem += mallocs() - allocs
		}
	}
	for i, s := range sides {
		res[i].name = s.name
		slices.Sort(res[i].lat)
		res[i].tput = float64(n) / elapsed[i].Seconds()
		res[i].cpu /= time.Duration(n)
		res[i].mem /= uint64(n)
	}
	return res
}

// run makes n calls over conc goroutines and returns their latencies.
func run(b *testing.B, conc, n int, call func() error) []time.Duration {
	b.Helper()
	lat := make([]time.Duration, n)
	var next atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	for range conc {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				t0 := time.Now()
				if err := call(); err != nil {
					failed.Store(err)
					return
				}
				lat[i] = time.Since(t0)
			}
		})
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	return lat
}

// mallocs is the number of heap allocations this process has made so far.
func mallocs() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.Mallocs
}

// cpuTime is the CPU time (user + system) this process has used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
