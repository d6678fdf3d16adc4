package gateway

import (
	"context"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// Call runs the call pipeline for an authenticated principal: resolve → authorize
// → idempotency → validate → invoke → map → publish event. It returns a response
// (success or execution error) or a *CallError (server or validation error).
func (g *Gateway) Call(ctx context.Context, p *Principal, req *toolfleetv1.CallToolRequest) (*toolfleetv1.CallToolResponse, error) {
	start := time.Now()
	callID := req.GetCallId()
	if callID == "" {
		callID = newID()
	}
	resp, ce, rt := g.call(ctx, p, req, callID)
	toolkit := "unknown"
	if rt != nil {
		toolkit = rt.def.GetToolkit()
	}
	km := g.metrics.kit(toolkit)
	km.duration.Observe(time.Since(start).Seconds())
	if ce != nil {
		ce.CallID = callID
		g.metrics.count(km, ce.Kind())
		g.log.LogAttrs(ctx, levelOf(ce), "call failed before the tool ran", logAttrs(req, callID, ce)...)
		return nil, ce
	}
	outcome := "success"
	if !resp.GetSuccess() {
		outcome = KindExecution
	}
	g.metrics.count(km, outcome)
	return resp, nil
}

func (g *Gateway) call(ctx context.Context, p *Principal, req *toolfleetv1.CallToolRequest, callID string) (*toolfleetv1.CallToolResponse, *CallError, *route) {
	rt, ce := g.reg.current().resolve(req.GetToolId())
	if ce != nil {
		return nil, ce, nil
	}
	def := rt.def
	ev := func() *toolfleetv1.CallEvent {
		e := newCallEvent(req, callID, def.GetId())
		if e.UserId == "" {
			e.UserId = p.Subject // the token's subject when the caller named no user
		}
		return e
	}
	fail := func(start time.Time, ce *CallError) (*toolfleetv1.CallToolResponse, *CallError, *route) {
		g.events.publish(EventFailed, withOutcome(ev(), time.Since(start), ce.Kind(), ce.Error()), def.GetToolkit(), def.GetName())
		return nil, ce, rt
	}
	start := time.Now()
	if ce := p.authorize(def); ce != nil {
		return fail(start, ce)
	}

	timeout := def.GetRequirements().GetTimeout().AsDuration()
	if timeout <= 0 {
		timeout = g.cfg.DefaultTimeout
	}
	var claim claim
	if req.GetCallId() == "" {
		// Nobody knows a generated id before the response: no repeat can race this
		// call, so only the result is stored (a later repeat with the returned id
		// gets it).
		claim = g.idem().fresh(callID)
	} else if claim, ce = g.idem().acquire(ctx, callID, timeout); ce != nil {
		return fail(start, ce)
	}
	if claim.stored != nil {
		if claim.stored.GetToolId() != def.GetId() {
			return nil, serverError(codes.AlreadyExists, nil, "stored for "+claim.stored.GetToolId(),
				"call_id %q was already used for another tool; use a new call_id", callID), rt
		}
		g.metrics.idempotentHits.Inc()
		return claim.stored, nil, rt
	}

	in, ve, err := decodeInput(rt.method.Input(), req.GetInput())
	if err != nil || ve != nil {
		g.idem().finish(claim, nil, false)
		if err != nil {
			return fail(start, serverError(codes.Internal, err, err.Error(), "the gateway could not validate the input of %s", def.GetId()))
		}
		return fail(start, validationError(ve))
	}

	g.events.publish(EventStarted, ev(), def.GetToolkit(), def.GetName())
	began := time.Now()
	out, err := g.invoke(ctx, rt, in, callID, req.GetTraceId())
	resp := &toolfleetv1.CallToolResponse{CallId: callID, ToolId: def.GetId()}
	ce = g.mapResult(ctx, rt, out, err, resp)
	resp.Duration = durationpb.New(time.Since(began))
	if ce != nil {
		g.idem().finish(claim, nil, false)
		return fail(began, ce)
	}
	// A failure the tool marks retryable is not stored: a retry runs the tool again.
	g.idem().finish(claim, resp, resp.GetSuccess() || !resp.GetError().GetCanRetry())
	if resp.GetSuccess() {
		g.events.publish(EventSucceeded, withOutcome(ev(), time.Since(began), "", ""), def.GetToolkit(), def.GetName())
	} else {
		g.events.publish(EventFailed, withOutcome(ev(), time.Since(began), KindExecution, resp.GetError().GetMessage()), def.GetToolkit(), def.GetName())
	}
	return resp, nil, rt
}

// CallMany runs several calls: read-only and idempotent tools in parallel (at
// most Config.BatchParallelism at once), the others one after another in the
// given order (alongside the parallel ones). Callers bound len(reqs) with
// Config.MaxBatchCalls (checkBatch).
func (g *Gateway) CallMany(ctx context.Context, p *Principal, reqs []*toolfleetv1.CallToolRequest) []*toolfleetv1.CallOutcome {
	out := make([]*toolfleetv1.CallOutcome, len(reqs))
	one := func(i int) {
		defer func() {
			if v := recover(); v != nil { // a batch goroutine must not take the process down
				out[i] = &toolfleetv1.CallOutcome{Outcome: &toolfleetv1.CallOutcome_Failure{Failure: g.panicError(ctx, v, "CallTools").Failure()}}
			}
		}()
		resp, err := g.Call(ctx, p, reqs[i])
		if err != nil {
			out[i] = &toolfleetv1.CallOutcome{Outcome: &toolfleetv1.CallOutcome_Failure{Failure: asCallError(err).Failure()}}
			return
		}
		out[i] = &toolfleetv1.CallOutcome{Outcome: &toolfleetv1.CallOutcome_Response{Response: resp}}
	}
	snap := g.reg.current()
	var parallel, ordered []int
	for i, r := range reqs {
		rt, ce := snap.resolve(r.GetToolId())
		if ce == nil && (rt.def.GetHints().GetReadOnly() || rt.def.GetHints().GetIdempotent()) {
			parallel = append(parallel, i)
			continue
		}
		ordered = append(ordered, i)
	}
	// The ordered calls take one of the parallel slots.
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(g.cfg.BatchParallelism-1, len(parallel)) {
		wg.Go(func() {
			for i := range next {
				one(i)
			}
		})
	}
	if g.cfg.BatchParallelism <= 1 {
		ordered = append(parallel, ordered...)
		slices.Sort(ordered)
		parallel = nil
	}
	wg.Go(func() {
		defer close(next)
		for _, i := range parallel {
			next <- i
		}
	})
	for _, i := range ordered {
		one(i)
	}
	wg.Wait()
	return out
}

// checkBatch refuses a CallTools batch over Config.MaxBatchCalls, whole and
// before any call runs.
func (g *Gateway) checkBatch(n int) *CallError {
	if n > g.cfg.MaxBatchCalls {
		return serverError(codes.InvalidArgument, nil, "",
			"a CallTools batch holds at most %d calls; this one has %d: split it into several batches", g.cfg.MaxBatchCalls, n)
	}
	return nil
}
