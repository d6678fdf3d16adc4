package gateway

import (
	"context"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/sdk/tool/journal"
	"github.com/toolfleet/toolfleet/services/gateway/auth"
	"github.com/toolfleet/toolfleet/services/gateway/ratelimit"
	"github.com/toolfleet/toolfleet/services/gateway/registry"
)

// Call runs the call pipeline for an authenticated principal (docs/architecture.md, docs/gateway.md):
//
//	resolve → authorize → approve → idempotency → validate → invoke → map → publish event
//
// It returns a response (success or execution error) or a *CallError (server or
// validation error).
func (g *Gateway) Call(ctx context.Context, p *Principal, req *toolfleetv1.CallToolRequest) (*toolfleetv1.CallToolResponse, error) {
	start := time.Now()
	callID := req.GetCallId()
	if callID == "" {
		callID = newID()
	}
	resp, ce, rt := g.call(ctx, p, req, callID)
	def := unresolved
	if rt != nil {
		def = rt.Def()
	}
	km := g.metrics.tool(def)
	km.duration.Observe(time.Since(start).Seconds())
	if ce != nil {
		ce.CallID = callID
		g.metrics.count(km, ce.Kind())
		if ce.Validation != nil {
			g.metrics.validationFailed(km, ce.Validation)
		}
		g.log.LogAttrs(ctx, levelOf(ce), "call failed before the tool ran", logAttrs(req, callID, ce)...)
		return nil, ce
	}
	outcome := "success"
	switch {
	case resp.GetInputRequired() != nil:
		outcome = outcomeInputRequired
	case !resp.GetSuccess():
		outcome = KindExecution
	}
	g.metrics.count(km, outcome)
	return resp, nil
}

func (g *Gateway) call(ctx context.Context, p *Principal, req *toolfleetv1.CallToolRequest, callID string) (*toolfleetv1.CallToolResponse, *CallError, *registry.Route) {
	rt, ce := resolve(g.reg.Current(), req.GetToolId())
	if ce != nil {
		return nil, ce, nil
	}
	def := rt.Def()
	var approval *toolfleetv1.Approval
	var credential *toolfleetv1.CallCredential // set once the worker is given a token
	ev := func() *toolfleetv1.CallEvent {
		e := newCallEvent(req, callID, def.GetId())
		if e.TraceId == "" {
			e.TraceId = traceIDOf(ctx) // the caller's traceparent, or the gateway's span
		}
		if e.UserId == "" {
			e.UserId = p.ID() // the effective principal when the caller named no user
		}
		if p.Via != nil {
			e.Via = p.Via.ID()
		}
		e.Approver, e.ApprovedAt = approval.GetApprover(), approval.GetApprovedAt()
		e.Credential = credential
		return e
	}
	fail := func(start time.Time, ce *CallError) (*toolfleetv1.CallToolResponse, *CallError, *registry.Route) {
		g.events.publish(p.ID(), EventFailed, withOutcome(ev(), start, ce.Kind(), ce.Error()), def.GetToolkit(), def.GetName())
		return nil, ce, rt
	}
	start := time.Now()
	if err := p.Authorize(def); err != nil {
		return fail(start, authError(err))
	}
	var refusal *auth.Error
	if approval, refusal = p.Approve(def, req.GetApproval()); refusal != nil {
		return fail(start, authError(refusal))
	}
	if missing := missingClientInput(def, req); len(missing) > 0 {
		return fail(start, serverError(codes.FailedPrecondition, ErrClientInput, "",
			"%s was not run: it asks its caller for input (%s), which this caller cannot answer: it did not declare it (CallToolRequest.client_input; MCP: the client capabilities; a run, program or MCP task that takes no questions declares none)",
			def.GetId(), capabilityNames(missing)))
	}
	ticket, ce := g.admit(ctx, p, def, req)
	if ce != nil {
		return fail(start, ce)
	}
	var answered *toolfleetv1.CallToolResponse // counted against byte quotas
	defer func() {
		if ticket.CountsBytes() && answered != nil {
			ticket.Done(int64(proto.Size(answered)))
			return
		}
		ticket.Done(0)
	}()

	var answers *toolfleetv1.InputAnswers
	if asksClientInput(def) {
		// Checked before the call_id is claimed: a forged state runs nothing.
		if answers, ce = g.clientInputAnswers(p, def, req); ce != nil {
			return fail(start, ce)
		}
	}
	offer, release, ce := g.offerOf(ctx, p, req)
	if ce != nil {
		return fail(start, ce)
	}
	defer release()
	claim, ce := g.claim(ctx, p, rt, req)
	if ce != nil {
		return fail(start, ce)
	}
	if claim != nil && claim.Stored != nil {
		g.metrics.idempotentHits.Inc()
		answered = claim.Stored
		return claim.Stored, nil, rt
	}
	sideEffects := !def.GetHints().GetReadOnly() && !def.GetHints().GetIdempotent()
	began := time.Now()
	var inv invokeResult
	if claim != nil && claim.Finished != nil {
		// The call ran: its worker recorded the answer after the gateway that
		// sent it went away. Answer with it, as that gateway would have.
		g.metrics.idempotentHits.Inc()
		var ce *CallError
		if rt, inv, ce = g.recorded(rt, claim.Finished); ce != nil {
			claim.Abandon() // the record stays for a replica that can read it
			return fail(start, ce)
		}
	} else {
		in, ve, err := decodeInput(rt.Method().Input(), req.GetInput())
		if err != nil || ve != nil {
			claim.Release()
			if err != nil {
				return fail(start, serverError(codes.Internal, err, err.Error(), "the gateway could not validate the input of %s", def.GetId()))
			}
			return fail(start, validationError(ve))
		}
		// The token is fetched for this attempt only, after the input is known
		// good: a caller who must connect first runs nothing (the call_id is free).
		credCtx, cred, ce := g.withCredential(ctx, p, def)
		if ce != nil {
			claim.Release()
			return fail(start, ce)
		}
		credential = cred
		started := g.events.announce(g.cfg.Events.StartedAfter, p.ID(), ev, def.GetToolkit(), def.GetName())
		callCtx := credCtx
		if sideEffects && claim.Owned() {
			// A caller that goes away (a crashed orchestrator, a cancelled client)
			// must not cut a side effect in half: the call runs on to the tool's own
			// timeout, its outcome is stored, and the caller's retry receives it.
			callCtx = context.WithoutCancel(credCtx)
		}
		var via string
		if p.Via != nil {
			via = p.Via.ID()
		}
		callCtx = tool.OutgoingPrincipal(callCtx, p.ID(), via)
		if answers != nil {
			if callCtx, ce = withClientInputAnswers(callCtx, def, answers); ce != nil {
				started.finish()
				claim.Release()
				return fail(began, ce)
			}
		}
		inv = g.invoke(callCtx, rt, in, attempt{claim: claim, journal: sideEffects && !def.GetDeduplicatesCallId(),
			callID: callID, traceID: req.GetTraceId(), offer: offer})
		started.finish() // before the terminal event
		switch {
		case inv.lost:
			claim.Abandon()
			return fail(began, serverError(codes.Unavailable, ErrWorkerUnavailable, inv.err.Error(),
				"%s did not run for this attempt: a retry of call_id %q took it over; retry with the same call_id to get its outcome", def.GetId(), callID))
		case inv.started:
			// A worker started it and its answer was lost: the journal tells
			// what became of it (the worker's answer, or that it went away).
			out, stored, err := claim.Await(ctx)
			switch {
			case stored != nil:
				answered = stored
				return stored, nil, rt
			case err != nil:
				return fail(began, g.notConcluded(ctx, def, callID, err))
			}
			var ce *CallError
			if rt, inv, ce = g.recorded(rt, out); ce != nil {
				claim.Abandon()
				return fail(began, ce)
			}
		}
	}
	resp := &toolfleetv1.CallToolResponse{CallId: callID, ToolId: def.GetId()}
	callerLogs(inv.trailer, resp)
	if q, ok := tool.AsInputRequired(inv.err); ok {
		// A question is no finished call: nothing is stored, and the caller's
		// repeat with the answers (the same call_id) runs the tool again.
		claim.Release()
		if ce = g.askClient(p, def, req, q, resp); ce != nil {
			return fail(began, ce)
		}
		resp.Duration = durationpb.New(time.Since(began))
		if resp.GetInputRequired() != nil {
			g.events.publish(p.ID(), EventInputRequired, withOutcome(ev(), began, "", ""), def.GetToolkit(), def.GetName())
		} else {
			g.events.publish(p.ID(), EventFailed, withOutcome(ev(), began, KindExecution, resp.GetError().GetMessage()), def.GetToolkit(), def.GetName())
		}
		answered = resp
		return resp, nil, rt
	}
	ce = g.mapResult(ctx, rt, inv.out, inv.err, resp, offer)
	resp.Duration = durationpb.New(time.Since(began))
	if ce != nil && ce.Code == codes.Unavailable && !inv.reached && !inv.journaled {
		// Known not to have started (refused, or fenced off): say so plainly.
		ce = serverError(codes.Unavailable, ErrWorkerUnavailable, ce.Server.GetDeveloperMessage(),
			"%s did not run: no worker serving it could take the call; try again later (with the same call_id, a retry never runs it twice)", def.GetId())
	}
	if ce != nil {
		if sideEffects && claim.Owned() && outcomeUnknown(true, inv.err) && (inv.reached || inv.journaled) {
			// It may have run: a retry must not run it again.
			reason := journal.ReasonUnjournaled
			if inv.journaled {
				reason = journal.ReasonCut
			}
			claim.Unknown(reason)
			ce = mayHaveRun(def, callID, ce)
		} else {
			claim.Release()
		}
		return fail(began, ce)
	}
	// A failure the tool marks retryable is not stored: a retry runs the tool again.
	// A response whose worker recorded its answer needs no wait: the record is durable.
	claim.Finish(resp, resp.GetSuccess() || !resp.GetError().GetCanRetry(), sideEffects && !inv.journaled)
	if resp.GetSuccess() {
		g.events.publish(p.ID(), EventSucceeded, withOutcome(ev(), began, "", ""), def.GetToolkit(), def.GetName())
	} else {
		g.events.publish(p.ID(), EventFailed, withOutcome(ev(), began, KindExecution, resp.GetError().GetMessage()), def.GetToolkit(), def.GetName())
	}
	answered = resp
	return resp, nil, rt
}

// admit applies the operator's limits (package ratelimit) to a call by p:
// over one, the call is refused before it runs with ResourceExhausted and
// the delay after which to try again; with the limits' shared state away
// and Limits.WhenNATSDown "closed", with Unavailable.
func (g *Gateway) admit(ctx context.Context, p *Principal, def *toolfleetv1.ToolDefinition, req *toolfleetv1.CallToolRequest) (*ratelimit.Ticket, *CallError) {
	if g.limits == nil {
		return nil, nil
	}
	t, r := g.limits.Admit(ctx, p.ID(), def.GetToolkit()+"."+def.GetName(), func() int64 { return int64(proto.Size(req.GetInput())) })
	switch {
	case r == nil:
		return t, nil
	case r.Unavailable:
		return nil, serverError(codes.Unavailable, ErrRateLimited, "", "%s was not run: %s", def.GetId(), r.Message)
	}
	ce := serverError(codes.ResourceExhausted, ErrRateLimited, "limit "+r.Limit+" of rule "+r.Rule, "%s was not run: %s", def.GetId(), r.Message)
	ce.RetryAfter = r.RetryAfter
	return nil, ce
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
	snap := g.reg.Current()
	var parallel, ordered []int
	for i, r := range reqs {
		rt, ce := resolve(snap, r.GetToolId())
		if ce == nil && (rt.Def().GetHints().GetReadOnly() || rt.Def().GetHints().GetIdempotent()) {
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
