package reliability

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/toolfleet/toolfleet/e2e"
	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/tool/tooltest"
)

// TestLoad calls Calculator.Add through the full gateway (auth, validation,
// events on JetStream) at a fixed rate — 200 calls/s for 5 s, 60 s in the
// full form — and requires every call to succeed. The rate is open-loop: a
// call is started on schedule whether or not earlier ones finished (at most
// maxInFlight at once; a call that cannot start on time counts as late), so
// a slow gateway shows in the latencies instead of lowering the rate. It
// logs p50/p99/max; it asserts no timing.
func TestLoad(t *testing.T) {
	t.Parallel()
	const rate, maxInFlight = 200, 256
	dur := 5 * time.Second
	if full() {
		dur = 60 * time.Second
	}
	fleet := e2e.Start(t, e2e.Options{NATS: true, Auth: true})
	c := toolfleetv1.NewToolGatewayServiceClient(tooltest.Dial(t, fleet.Addr))
	ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+fleet.Token(t, "tools:call"))
	in := mustStruct(map[string]any{"a": 2, "b": 3})

	var (
		mu        sync.Mutex
		latencies []time.Duration
		failures  []string
		late      atomic.Int64
		wg        sync.WaitGroup
	)
	slots := make(chan struct{}, maxInFlight)
	tick := time.NewTicker(time.Second / rate)
	defer tick.Stop()
	end := time.After(dur)
	began := time.Now()
	sent := 0
loop:
	for {
		select {
		case <-end:
			break loop
		case <-tick.C:
		}
		select {
		case slots <- struct{}{}:
		default:
			late.Add(1)
			continue
		}
		sent++
		wg.Go(func() {
			defer func() { <-slots }()
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			start := time.Now()
			resp, err := c.CallTool(cctx, &toolfleetv1.CallToolRequest{ToolId: "Calculator.Add", Input: in})
			took := time.Since(start)
			mu.Lock()
			defer mu.Unlock()
			if err != nil || !resp.GetSuccess() {
				failures = append(failures, errText(err, resp))
				return
			}
			latencies = append(latencies, took)
		})
	}
	wg.Wait()
	elapsed := time.Since(began)
	if len(failures) > 0 || late.Load() > 0 {
		t.Fatalf("%d of %d calls failed (first: %v), %d could not start on time", len(failures), sent, first(failures), late.Load())
	}
	slices.Sort(latencies)
	p := func(q float64) time.Duration { return latencies[int(q*float64(len(latencies)-1))] }
	t.Logf("%d calls in %s at %d/s: 0 errors; latency p50 %s, p99 %s, max %s",
		sent, elapsed.Round(time.Millisecond), rate, p(0.5).Round(time.Microsecond), p(0.99).Round(time.Microsecond), latencies[len(latencies)-1].Round(time.Microsecond))
}

func errText(err error, resp *toolfleetv1.CallToolResponse) string {
	if err != nil {
		return err.Error()
	}
	return resp.GetError().GetMessage()
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}
