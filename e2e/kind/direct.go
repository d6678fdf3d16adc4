package main

// Direct callers in the chaos (issue 31, "exactly once under every fault"):
// gRPC callers making non-idempotent KV.Increment calls through the gateway
// Service, each logical call with its own call_id and its own counter key,
// retrying the same call_id across the --force deletion of a gateway pod
// until a definite answer. The counters are read from the KV worker's bucket
// over NATS and every call is classified as in e2e/reliability
// (exactlyonce_test.go): a counter at 2 or more ran twice, a success with
// counter 0 was lost, NOT_FOUND for KV.Increment is a fault, and a call told
// it failed otherwise must not have run.

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// Classes of a direct call's final answer.
const (
	classSuccess    = "success"
	classMayHaveRun = "may have run" // ALREADY_EXISTS, "may have run"
	classDidNotRun  = "did not run"  // still not definite when the caller gave up
	classNotFound   = "NOT_FOUND"
	classOther      = "other"
)

// directPatience is how long one logical call is retried: past a gateway
// pod's deletion and the lock it left (the tool's timeout + 10 s), and
// through a rollout.
const directPatience = 5 * time.Minute

type directCall struct {
	callID, key, class, detail string
	attempts                   int
}

// directCallers calls until stop is closed; wait returns every logical call.
type directCallers struct {
	stop chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	cc   *grpc.ClientConn
	all  []*directCall
}

// startDirectCallers starts n callers through the gateway's port-forward.
func (h *harness) startDirectCallers(ctx context.Context, stamp string, n int) (*directCallers, error) {
	f := h.fleet
	cc, err := grpc.NewClient(f.gateway.addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	d := &directCallers{stop: make(chan struct{}), cc: cc}
	gw := toolfleetv1.NewToolGatewayServiceClient(cc)
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+f.token)
	for c := range n {
		d.wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-d.stop:
					return
				default:
				}
				id := fmt.Sprintf("kind-direct-%s-%d-%d", stamp, c, i)
				dc := &directCall{callID: id, key: id}
				dc.call(ctx, gw)
				d.mu.Lock()
				d.all = append(d.all, dc)
				d.mu.Unlock()
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
	return d, nil
}

// wait stops the callers, waits for their calls in flight and returns all.
func (d *directCallers) wait() []*directCall {
	close(d.stop)
	d.wg.Wait()
	_ = d.cc.Close()
	return d.all
}

// call makes the logical call, retrying the same call_id until the answer is
// definite or directPatience has passed.
func (dc *directCall) call(ctx context.Context, gw toolfleetv1.ToolGatewayServiceClient) {
	ctx, cancel := context.WithTimeout(ctx, directPatience)
	defer cancel()
	in, _ := structpb.NewStruct(map[string]any{"key": dc.key})
	req := &toolfleetv1.CallToolRequest{CallId: dc.callID, ToolId: "KV.Increment", Input: in}
	backoff := 100 * time.Millisecond
	for {
		dc.attempts++
		actx, acancel := context.WithTimeout(ctx, 30*time.Second)
		resp, err := gw.CallTool(actx, req)
		acancel()
		switch code := status.Code(err); {
		case err == nil && resp.GetSuccess():
			dc.class = classSuccess
			return
		case err == nil:
			dc.class, dc.detail = classOther, "execution error: "+resp.GetError().GetMessage()
			return
		case code == codes.AlreadyExists && strings.Contains(err.Error(), "may have run"):
			dc.class, dc.detail = classMayHaveRun, err.Error()
			return
		case code == codes.NotFound:
			dc.class, dc.detail = classNotFound, err.Error()
			return
		case code != codes.Unavailable && code != codes.DeadlineExceeded && code != codes.ResourceExhausted &&
			code != codes.Aborted && code != codes.Canceled && !passing(err):
			dc.class, dc.detail = classOther, err.Error()
			return
		}
		dc.detail = err.Error()
		select {
		case <-ctx.Done():
			dc.class = classDidNotRun
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 3*time.Second)
	}
}

// checkDirectCalls reads every call's counter from the KV worker's bucket
// (agent_memory) over NATS, records the table as a figure and returns the
// broken invariants.
func (h *harness) checkDirectCalls(ctx context.Context, calls []*directCall) []string {
	js, err := jetstream.New(h.fleet.nc)
	if err != nil {
		return []string{"JetStream: " + err.Error()}
	}
	kv, err := retry(ctx, outage, func(ctx context.Context) (jetstream.KeyValue, error) { return js.KeyValue(ctx, "agent_memory") })
	if err != nil {
		return []string{"the KV worker's bucket: " + err.Error()}
	}
	type row struct{ calls, zero, one, more int }
	rows := map[string]*row{}
	var problems []string
	problem := func(format string, args ...any) {
		if len(problems) < 10 {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}
	var twice, lost, notFound, failedButRan int
	for _, c := range calls {
		var n int64
		e, err := kv.Get(ctx, c.key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return append(problems, fmt.Sprintf("read counter %s: %v", c.key, err))
		default:
			if n, err = strconv.ParseInt(string(e.Value()), 10, 64); err != nil {
				return append(problems, fmt.Sprintf("counter %s holds %q", c.key, e.Value()))
			}
		}
		r := rows[c.class]
		if r == nil {
			r = &row{}
			rows[c.class] = r
		}
		r.calls++
		switch {
		case n == 0:
			r.zero++
		case n == 1:
			r.one++
		default:
			r.more++
			twice++
			problem("direct call %s ran %d times", c.callID, n)
		}
		switch {
		case c.class == classSuccess && n == 0:
			lost++
			problem("direct call %s answered success but its counter is 0", c.callID)
		case c.class == classNotFound:
			notFound++
			problem("direct call %s: NOT_FOUND for KV.Increment: %s", c.callID, c.detail)
		case c.class == classOther && n != 0:
			failedButRan++
			problem("direct call %s was told it failed but ran: %s", c.callID, c.detail)
		}
	}
	classes := make([]string, 0, len(rows))
	for k := range rows {
		classes = append(classes, k)
	}
	sort.Strings(classes)
	var parts []string
	for _, k := range classes {
		r := rows[k]
		parts = append(parts, fmt.Sprintf("%s %d (counter 0: %d, 1: %d, ≥2: %d)", k, r.calls, r.zero, r.one, r.more))
	}
	h.figure("%d direct KV.Increment calls: %s", len(calls), strings.Join(parts, "; "))
	if twice+lost+notFound+failedButRan > 0 {
		problems = append(problems, fmt.Sprintf("direct calls: %d ran twice, %d successes lost, %d NOT_FOUND, %d told failed but ran",
			twice, lost, notFound, failedButRan))
	}
	return problems
}
