package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
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
	"github.com/toolfleet/toolfleet/workers/calculator/calculator"
)

// BenchmarkGatewayCall calls Calculator.Add through the gateway (gRPC, with JWT
// auth, input validation, idempotency on NATS KV and call events on) and directly
// on the worker with grpc-go, in the same run, at 1 and 64 concurrent callers.
// It reports the gateway's throughput and p50/p99 latency as ratios to direct,
// and the throughput ratio of a gateway without NATS (auth and validation only).
//
//	go test ./bench -run '^$' -bench GatewayCall -benchtime 20000x
func BenchmarkGatewayCall(b *testing.B) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	nats := natstest.Start(b)
	w, _ := tooltest.Start(b, tool.Config{Name: "calculator"}, func(w *tool.Worker) {
		calculatorv1.RegisterCalculatorServiceServer(w, calculator.New())
	})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	b.Cleanup(func() { cancel(); wg.Wait() })
	secret := []byte("bench-secret-bench-secret-bench-secret")
	// The full gateway, and one without NATS (no idempotency, no events) to show
	// what those cost.
	start := func(natsURL string) *gateway.Gateway {
		g, err := gateway.New(ctx, gateway.Config{Listen: "127.0.0.1:0", Workers: []string{w.Addr()}, NATSURL: natsURL,
			Auth: gateway.AuthConfig{HS256Secret: secret}, Logger: quiet})
		if err != nil {
			b.Fatal(err)
		}
		wg.Go(func() { _ = g.Run(ctx) })
		<-g.Ready()
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if _, err := g.GetTool(&toolfleetv1.GetToolRequest{ToolId: "Calculator.Add"}); err == nil {
				return g
			}
			if time.Now().After(deadline) {
				b.Fatal("the gateway did not load the calculator")
			}
		}
	}
	g, lite := start(nats.URL()), start("")
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"scope": "tools:call", "exp": time.Now().Add(time.Hour).Unix()}).SignedString(secret)
	if err != nil {
		b.Fatal(err)
	}
	direct := calculatorv1.NewCalculatorServiceClient(tooltest.Dial(b, w.Addr()))
	gw := toolfleetv1.NewToolGatewayServiceClient(tooltest.Dial(b, g.Addr()))
	gwLite := toolfleetv1.NewToolGatewayServiceClient(tooltest.Dial(b, lite.Addr()))
	input, _ := structpb.NewStruct(map[string]any{"a": 2, "b": 3})
	authCtx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+tok)
	var seq atomic.Int64
	gwCall := func(c toolfleetv1.ToolGatewayServiceClient) error {
		resp, err := c.CallTool(authCtx, &toolfleetv1.CallToolRequest{
			CallId: fmt.Sprintf("bench-%d", seq.Add(1)), ToolId: "Calculator.Add", Input: input})
		if err == nil && !resp.GetSuccess() {
			err = fmt.Errorf("call failed: %v", resp.GetError())
		}
		return err
	}
	sides := []struct {
		name string
		call func() error
	}{
		{"direct", func() error {
			_, err := direct.Add(context.Background(), &calculatorv1.AddRequest{A: 2, B: 3})
			return err
		}},
		{"gateway", func() error { return gwCall(gw) }},
		{"gateway-no-nats", func() error { return gwCall(gwLite) }},
	}
	for _, conc := range []int{1, 64} {
		b.Run(fmt.Sprintf("callers=%d", conc), func(b *testing.B) {
			var tput [3]float64
			var lat [3][]time.Duration
			var cpu [3]time.Duration
			for i, s := range sides {
				before := cpuTime()
				tput[i], lat[i] = run(b, conc, b.N, s.call)
				cpu[i] = (cpuTime() - before) / time.Duration(b.N)
			}
			p := func(l []time.Duration, q float64) time.Duration { return l[int(q*float64(len(l)-1))] }
			b.ReportMetric(tput[0], "direct-calls/s")
			b.ReportMetric(tput[1], "gateway-calls/s")
			b.ReportMetric(tput[1]/tput[0], "throughput-ratio")
			b.ReportMetric(float64(p(lat[1], 0.5))/float64(p(lat[0], 0.5)), "p50-ratio")
			b.ReportMetric(float64(p(lat[1], 0.99))/float64(p(lat[0], 0.99)), "p99-ratio")
			b.ReportMetric(tput[2]/tput[0], "no-nats-throughput-ratio")
			// CPU per call (client, gateway, worker and NATS all run in this process)
			// moves less than throughput when other work shares the machine.
			b.ReportMetric(float64(cpu[1])/float64(cpu[0]), "cpu-per-call-ratio")
			b.ReportMetric(float64(cpu[2])/float64(cpu[0]), "no-nats-cpu-per-call-ratio")
			b.Logf("callers=%d n=%d: direct p50=%s p99=%s cpu/call=%s; gateway p50=%s p99=%s cpu/call=%s; gateway without NATS p50=%s p99=%s cpu/call=%s",
				conc, b.N, p(lat[0], 0.5), p(lat[0], 0.99), cpu[0], p(lat[1], 0.5), p(lat[1], 0.99), cpu[1], p(lat[2], 0.5), p(lat[2], 0.99), cpu[2])
		})
	}
}

// run makes n calls over conc goroutines and returns calls/s and sorted latencies.
func run(b *testing.B, conc, n int, call func() error) (float64, []time.Duration) {
	b.Helper()
	lat := make([]time.Duration, n)
	var next atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
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
	elapsed := time.Since(start)
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	slices.Sort(lat)
	return float64(n) / elapsed.Seconds(), lat
}

// cpuTime is the CPU time (user + system) this process has used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
