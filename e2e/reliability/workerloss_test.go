package reliability

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/e2e"
	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	kvv1 "github.com/toolfleet/toolfleet/gen/tools/kv/v1"
	"github.com/toolfleet/toolfleet/sdk/client"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/sdk/tool/tooltest"
	"github.com/toolfleet/toolfleet/workers/kv/kv"
)

// replica serves KV with a Delete that records each call id it ran and
// answers 20 ms after deleting: a replica killed in that window has done the
// side effect but never answered, the case that tempts a second run.
type replica struct {
	*kv.Service
	mu  *sync.Mutex
	ran map[string]int
}

func (r replica) Delete(ctx context.Context, req *kvv1.DeleteRequest) (*kvv1.DeleteResponse, error) {
	r.mu.Lock()
	r.ran[tool.CallID(ctx)]++
	r.mu.Unlock()
	resp, err := r.Service.Delete(ctx, req)
	select {
	case <-time.After(20 * time.Millisecond):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return resp, err
}

// TestWorkerLoss kills one of two replicas (its server stops at once,
// cutting the calls in flight) under 50 calls/s of a non-idempotent tool
// (KV.Delete) with caller call ids and the client's retries. Every call must
// end within its deadline; calls that never reached a worker go to the other
// replica; no call id runs twice.
func TestWorkerLoss(t *testing.T) {
	t.Parallel()
	dur := 3 * time.Second
	if full() {
		dur = 20 * time.Second
	}
	fleet := e2e.Start(t, e2e.Options{NATS: true})
	nc, err := nats.Connect(fleet.NATSURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	bucket, err := kv.OpenBucket(t.Context(), js, kv.BucketConfig{})
	if err != nil {
		t.Fatal(err)
	}
	keys := int(dur/(20*time.Millisecond)) + 50
	for i := range keys {
		if _, err := bucket.Put(t.Context(), fmt.Sprintf("k-%d", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	shared := replica{Service: kv.New(bucket), mu: &sync.Mutex{}, ran: map[string]int{}}
	// Announcements every second hold for 3 s: a replica's registration must
	// not lapse while it lives, which a 100 ms interval (300 ms) allowed on two
	// cores busy with the rest of the suite under -race (the lapsed tool was
	// then "unknown" and its calls failed NotFound). The killed replica needs
	// no expiry: it says it is leaving, and a dial to it fails before the call.
	start := func() func() error {
		_, stop := tooltest.Start(t, tool.Config{Name: "kv", NATSURL: fleet.NATSURL, AnnounceInterval: time.Second,
			ShutdownTimeout: time.Millisecond}, func(w *tool.Worker) { kvv1.RegisterKVServiceServer(w, shared) })
		return stop
	}
	killA, stopB := start(), start()
	defer func() { _ = stopB() }()
	fleet.WaitTool(t, "KV.Delete")
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
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	killAt := time.After(dur / 3)
	var inFlight, inFlightAtKill atomic.Int64
	end := time.After(dur)
	const deadline = 10 * time.Second
loop:
	for i := 0; ; i++ {
		select {
		case <-end:
			break loop
		case <-killAt:
			// Only calls in flight now can be cut inside the killed replica.
			inFlightAtKill.Store(inFlight.Load())
			if err := killA(); err != nil {
				t.Logf("killed replica: %v", err)
			}
			continue
		case <-tick.C:
		}
		if i >= keys {
			break loop
		}
		sent.Add(1)
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(t.Context(), deadline)
			defer cancel()
			began := time.Now()
			inFlight.Add(1)
			defer inFlight.Add(-1)
			// KV.Delete needs an approval: this caller (auth off) names the approver.
			res, err := c.CallTool(ctx, &toolfleetv1.CallToolRequest{CallId: fmt.Sprintf("loss-%d", i), ToolId: "KV.Delete",
				Input: mustStruct(map[string]any{"key": fmt.Sprintf("k-%d", i)}), Approval: &toolfleetv1.Approval{Approver: "ops"}})
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
	// refused ("may have run") rather than run twice, so it can fail; no
	// other call may, and no more of them than were in flight at the kill.
	for _, f := range failures {
		if !strings.Contains(f, "may have run") {
			t.Errorf("a call failed otherwise than as cut by the kill: %s", f)
		}
	}
	if n := int64(len(failures)); n > inFlightAtKill.Load() {
		t.Errorf("%d of %d calls failed, but only %d were in flight when the replica was killed; the first: %v",
			n, sent.Load(), inFlightAtKill.Load(), failures[:min(3, len(failures))])
	}
	t.Logf("%d calls, one of two replicas killed after %s: %d succeeded, %d failed (%v), %d ran twice, none outlived its deadline",
		sent.Load(), dur/3, ok.Load(), len(failures), failures, twice)
}
