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
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
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
		n, err := retry(ctx, outage, func(ctx context.Context) (int64, error) { return leaderCounter(ctx, h.fleet.nc, "agent_memory", c.key) })
		if err != nil {
			return append(problems, fmt.Sprintf("read counter %s: %v", c.key, err))
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
	retried, most := 0, 0
	for _, c := range calls {
		if c.attempts > 1 {
			retried++
		}
		most = max(most, c.attempts)
	}
	// Retried calls show that the gateway's deletion reached these callers.
	h.figure("%d direct KV.Increment calls: %s; %d retried the same call_id (at most %d attempts)",
		len(calls), strings.Join(parts, "; "), retried, most)
	if twice+lost+notFound+failedButRan > 0 {
		problems = append(problems, fmt.Sprintf("direct calls: %d ran twice, %d successes lost, %d NOT_FOUND, %d told failed but ran",
			twice, lost, notFound, failedButRan))
	}
	return problems
}

// leaderCounter reads key's counter in a KV bucket from the bucket stream's
// leader (JetStream's STREAM.MSG.GET). Not kv.Get: KV buckets allow direct
// gets, which any replica answers, and a replica still catching up (nats-1
// after its deletion) answers "not found" for a counter written just before:
// a success would look lost. A missing or deleted key is 0.
func leaderCounter(ctx context.Context, nc *nats.Conn, bucket, key string) (int64, error) {
	req, _ := json.Marshal(map[string]string{"last_by_subj": "$KV." + bucket + "." + key})
	msg, err := nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET.KV_"+bucket, req)
	if err != nil {
		return 0, fmt.Errorf("get %s: %v: %w", key, err, context.DeadlineExceeded) // passing: retried
	}
	var resp struct {
		Message *struct {
			Data []byte `json:"data"`
			Hdrs []byte `json:"hdrs"`
		} `json:"message"`
		Error *struct {
			Code        int    `json:"code"`
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return 0, fmt.Errorf("get %s: %w", key, err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrCode == 10037: // no message found
		return 0, nil
	case resp.Error != nil && resp.Error.Code == 503: // no leader right now
		return 0, fmt.Errorf("get %s: %s: %w", key, resp.Error.Description, context.DeadlineExceeded)
	case resp.Error != nil:
		return 0, fmt.Errorf("get %s: %s", key, resp.Error.Description)
	case resp.Message == nil:
		return 0, fmt.Errorf("get %s: empty answer %s", key, msg.Data)
	case bytes.Contains(resp.Message.Hdrs, []byte("KV-Operation")): // a delete or purge marker
		return 0, nil
	}
	n, err := strconv.ParseInt(string(resp.Message.Data), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("counter %s holds %q", key, resp.Message.Data)
	}
	return n, nil
}
