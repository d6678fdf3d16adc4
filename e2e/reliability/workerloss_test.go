package reliability

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/e2e"
	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	calculatorv1 "github.com/toolfleet/toolfleet/gen/tools/calculator/v1"
	"github.com/toolfleet/toolfleet/sdk/client"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/sdk/tool/tooltest"
	"github.com/toolfleet/toolfleet/workers/calculator/calculator"
)

// replica is a calculator whose Add takes a while and records each call id
// it ran, shared by the replicas of the test.
type replica struct {
	*calculator.Service
	mu  *sync.Mutex
	ran map[string]int
}

func (r replica) Add(ctx context.Context, req *calculatorv1.AddRequest) (*calculatorv1.AddResponse, error) {
	r.mu.Lock()
	r.ran[tool.CallID(ctx)]++
	r.mu.Unlock()
	select {
	case <-time.After(20 * time.Millisecond): // long enough to be cut mid-call
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return r.Service.Add(ctx, req)
}

// TestWorkerLoss kills one of two replicas (its server stops at once,
// cutting the calls in flight) under 50 calls/s with caller call ids and the
// client's retries. Every call must end within its deadline; calls that
// never reached a worker go to the other replica; no call id runs twice.
func TestWorkerLoss(t *testing.T) {
	t.Parallel()
	dur := 3 * time.Second
	if full() {
		dur = 20 * time.Second
	}
	fleet := e2e.Start(t, e2e.Options{NATS: true})
	shared := replica{Service: calculator.New(), mu: &sync.Mutex{}, ran: map[string]int{}}
	start := func() func() error {
		_, stop := tooltest.Start(t, tool.Config{Name: "calc", NATSURL: fleet.NATSURL, AnnounceInterval: 100 * time.Millisecond,
			ShutdownTimeout: time.Millisecond}, func(w *tool.Worker) { calculatorv1.RegisterCalculatorServiceServer(w, shared) })
		return stop
	}
	killA, stopB := start(), start()
	defer func() { _ = stopB() }()
	fleet.WaitTool(t, "Calculator.Add")
	c, err := client.New(fleet.Addr, client.WithRetry(client.RetryPolicy{MaxAttempts: 5, InitialBackoff: 50 * time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	var (
		sent, ok, late atomic.Int64
		mu             sync.Mutex
		failures       []string
		wg             sync.WaitGroup
	)
	in := mustStruct(map[string]any{"a": 2, "b": 3})
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	killAt := time.After(dur / 3)
	end := time.After(dur)
	const deadline = 10 * time.Second
loop:
	for i := 0; ; i++ {
		select {
		case <-end:
			break loop
		case <-killAt:
			if err := killA(); err != nil {
				t.Logf("killed replica: %v", err)
			}
			continue
		case <-tick.C:
		}
		sent.Add(1)
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(t.Context(), deadline)
			defer cancel()
			began := time.Now()
			res, err := c.CallTool(ctx, &toolfleetv1.CallToolRequest{CallId: fmt.Sprintf("loss-%d", i), ToolId: "Calculator.Add", Input: in})
			if time.Since(began) > deadline+time.Second {
				late.Add(1) // the call outlived its deadline
			}
			if err == nil && res.Success {
				ok.Add(1)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				err = errors.New(res.Error.GetMessage())
			}
			failures = append(failures, err.Error())
		})
	}
	wg.Wait()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	twice := 0
	for id, n := range shared.ran {
		if n > 1 {
			twice++
			t.Errorf("call id %s ran %d times", id, n)
		}
	}
	if late.Load() > 0 {
		t.Errorf("%d calls outlived their deadline", late.Load())
	}
	// A call cut inside the killed replica may have run there: its retry is
	// refused rather than run twice, so it can fail; no other call may.
	if len(failures) > 3 {
		t.Errorf("%d of %d calls failed: %v", len(failures), sent.Load(), failures)
	}
	t.Logf("%d calls, one of two replicas killed after %s: %d succeeded, %d failed (%v), 0 ran twice, none outlived its deadline",
		sent.Load(), dur/3, ok.Load(), len(failures), failures)
}
