package gateway

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/durationpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/sdk/tool/journal"
	"github.com/toolfleet/toolfleet/services/gateway/auth"
	"github.com/toolfleet/toolfleet/services/gateway/idempotency"
	"github.com/toolfleet/toolfleet/services/gateway/ratelimit"
	"github.com/toolfleet/toolfleet/services/gateway/registry"
)

// Call runs the call pipeline for an authenticated principal (ARCHITECTURE.md §4):
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
		return e
	}
	fail := func(start time.Time, ce *CallError) (*toolfleetv1.CallToolResponse, *CallError, *registry.Route) {
		g.events.publish(EventFailed, withOutcome(ev(), start, ce.Kind(), ce.Error()), def.GetToolkit(), def.GetName())
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
			"%s was not run: it asks its caller for input (%s), which this caller cannot answer: it did not declare it (CallToolRequest.client_input; MCP: the client capabilities), and agent runs and programs cannot answer a tool's questions",
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
	if asksInput(def) {
		// Checked before the call_id is claimed: a forged state runs nothing.
		if answers, ce = g.inputAnswers(p, def, req); ce != nil {
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
		started := g.events.announce(g.cfg.StartedEventAfter, ev, def.GetToolkit(), def.GetName())
		callCtx := ctx
		if sideEffects && claim.Owned() {
			// A caller that goes away (a crashed orchestrator, a cancelled client)
			// must not cut a side effect in half: the call runs on to the tool's own
			// timeout, its outcome is stored, and the caller's retry receives it.
			callCtx = context.WithoutCancel(ctx)
		}
		var via string
		if p.Via != nil {
			via = p.Via.ID()
		}
		callCtx = tool.OutgoingPrincipal(callCtx, p.ID(), via)
		if answers != nil {
			if callCtx, ce = withInputAnswers(callCtx, def, answers); ce != nil {
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
		if ce = g.inputRequired(p, def, req, q, resp); ce != nil {
			return fail(began, ce)
		}
		resp.Duration = durationpb.New(time.Since(began))
		if resp.GetInputRequired() != nil {
			g.events.publish(EventInputRequired, withOutcome(ev(), began, "", ""), def.GetToolkit(), def.GetName())
		} else {
			g.events.publish(EventFailed, withOutcome(ev(), began, KindExecution, resp.GetError().GetMessage()), def.GetToolkit(), def.GetName())
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
		g.events.publish(EventSucceeded, withOutcome(ev(), began, "", ""), def.GetToolkit(), def.GetName())
	} else {
		g.events.publish(EventFailed, withOutcome(ev(), began, KindExecution, resp.GetError().GetMessage()), def.GetToolkit(), def.GetName())
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

// claim applies the idempotency rules to a call (docs/gateway.md, "Idempotency"
// and "Exactly once"):
//
//   - a generated call_id (the caller sent none) stores nothing: nobody can
//     repeat an id they never received, so there is nothing to protect;
//   - a caller's call_id is a key scoped to (effective principal, tool); a finished
//     call with the same input answers from the store, other input is a conflict;
//   - whether an earlier call with the key ran is read from the call journal:
//     never started, it runs; finished, its answer; started by a worker that
//     went away, "may have run" — unless running again is harmless;
//   - while the store is unreachable or full, read-only and idempotent tools run
//     anyway, and any other tool is refused (retryable) rather than run
//     unprotected;
//   - a gateway configured without NATS has no store at all (documented): a
//     call_id then only reaches the worker.
func (g *Gateway) claim(ctx context.Context, p *Principal, rt *registry.Route, req *toolfleetv1.CallToolRequest) (*idempotency.Claim, *CallError) {
	if req.GetCallId() == "" {
		return nil, nil
	}
	def := rt.Def()
	digest, err := idempotency.DigestOf(req.GetInput())
	if err != nil {
		return nil, serverError(codes.Internal, err, err.Error(), "the gateway could not read the input of %s", def.GetId())
	}
	key := idempotency.Key{Principal: p.ID(), Tool: def.GetToolkit() + "." + def.GetName(), CallID: req.GetCallId()}
	hints := def.GetHints()
	rerunnable := hints.GetReadOnly() || hints.GetIdempotent() || def.GetDeduplicatesCallId()
	store := g.idem()
	c, err := store.Acquire(ctx, key, digest, idempotency.Options{Rerunnable: rerunnable, Unjournaled: !rerunnable && !rt.Journaled()})
	if reason := refusalReason(ctx, err); reason != "" {
		g.metrics.idempotencyRefused.WithLabelValues(reason).Inc()
	}
	switch {
	case err == nil:
		return c, nil
	case errors.Is(err, idempotency.ErrConflict):
		return nil, serverError(codes.AlreadyExists, ErrIdempotency, "",
			"call_id %q was already used for %s.%s with another input; use a new call_id for a new call", req.GetCallId(), def.GetToolkit(), def.GetName())
	case errors.Is(err, idempotency.ErrOutcomeUnknown):
		return nil, mayHaveRun(def, req.GetCallId(), nil)
	case errors.Is(err, idempotency.ErrResultTooLarge):
		return nil, serverError(codes.AlreadyExists, ErrIdempotency, "",
			"the call with call_id %q already ran, and its result was too large to keep for repeats; use a new call_id to run it again", req.GetCallId())
	case errors.Is(err, idempotency.ErrStillRunning), ctx.Err() != nil:
		return nil, serverError(codes.DeadlineExceeded, ErrDeadline, err.Error(),
			"the deadline passed before the call started (an earlier call with this call_id may still be running); retry with the same call_id to get its outcome")
	}
	if g.cfg.NATSURL == "" {
		return nil, nil // configured without a store: call_ids only reach the worker
	}
	if hints.GetReadOnly() || hints.GetIdempotent() {
		g.warnUnprotected(err)
		return nil, nil // a second run is harmless
	}
	if errors.Is(err, idempotency.ErrFull) {
		g.metrics.idempotencyRefused.WithLabelValues(refusedFull).Inc()
		return nil, serverError(codes.ResourceExhausted, ErrIdempotency, err.Error(),
			"%s was not run: the gateway's record of calls by call_id is full, and it keeps every caller's finished calls rather than forget one; try again later, or ask the operator to raise its size", def.GetId())
	}
	g.metrics.idempotencyRefused.WithLabelValues(refusedUnavailable).Inc()
	return nil, serverError(codes.Unavailable, ErrIdempotency, err.Error(),
		"the idempotency store is unreachable, so %s (which is neither read-only nor idempotent) was not run with call_id %q; try again shortly", def.GetId(), req.GetCallId())
}

// mayHaveRun is the answer for a call whose outcome is unknown, the same for
// its first caller and every retry (cause: the failure the first caller met,
// if any).
func mayHaveRun(def *toolfleetv1.ToolDefinition, callID string, cause *CallError) *CallError {
	dev := ""
	if cause != nil {
		dev = cause.Error()
	}
	return serverError(codes.AlreadyExists, ErrOutcomeUnknown, dev,
		"the call to %s with call_id %q may have run: it started, and then its worker or gateway went away or it was cut off, so its outcome is unknown; it is not run again with this call_id: check whether it took effect, then use a new call_id to run it again", def.GetId(), callID)
}

// notConcluded is the answer when the journal could not tell what became of
// a call a worker started.
func (g *Gateway) notConcluded(ctx context.Context, def *toolfleetv1.ToolDefinition, callID string, err error) *CallError {
	switch {
	case errors.Is(err, idempotency.ErrOutcomeUnknown):
		return mayHaveRun(def, callID, nil)
	case errors.Is(err, idempotency.ErrStillRunning), ctx.Err() != nil:
		return serverError(codes.DeadlineExceeded, ErrDeadline, err.Error(),
			"the deadline passed while %s was still running; retry with the same call_id to get its outcome", def.GetId())
	}
	return serverError(codes.Unavailable, ErrIdempotency, err.Error(),
		"%s started, and whether it finished is not known yet: the idempotency store did not answer; retry with the same call_id to get its outcome", def.GetId())
}

// recorded turns a worker's recorded answer into the result of an invoke,
// read with the contract of the toolkit version that ran it.
func (g *Gateway) recorded(rt *registry.Route, o *toolfleetv1.WorkerCallOutcome) (*registry.Route, invokeResult, *CallError) {
	def := rt.Def()
	if v := o.GetToolkitVersion(); v != "" && v != def.GetVersion() {
		other, ce := resolve(g.reg.Current(), def.GetToolkit()+"."+def.GetName()+"@"+v)
		if ce != nil {
			return rt, invokeResult{}, serverError(codes.AlreadyExists, ErrIdempotency, ce.Error(),
				"the call with this call_id already ran on %s.%s@%s, which is no longer served, so its answer cannot be read; use a new call_id to run it again", def.GetToolkit(), def.GetName(), v)
		}
		rt = other
	}
	r := invokeResult{journaled: true}
	if logs := o.GetLogs(); logs != nil {
		if b, err := proto.Marshal(logs); err == nil {
			r.trailer = metadata.Pairs(tool.LogTrailer, string(b))
		}
	}
	if o.GetCode() != 0 {
		r.err = status.FromProto(&spb.Status{Code: o.GetCode(), Message: o.GetMessage(), Details: o.GetDetails()}).Err()
		return rt, r, nil
	}
	out := dynamicpb.NewMessage(rt.Method().Output())
	if err := proto.Unmarshal(o.GetOutput(), out); err != nil {
		return rt, r, serverError(codes.Internal, err, err.Error(), "the recorded answer of %s cannot be read", rt.Def().GetId())
	}
	r.out = out
	return rt, r, nil
}

// refusalReason is the idempotency_refused_total reason of Acquire's error,
// or "" when the call may still run.
func refusalReason(ctx context.Context, err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, idempotency.ErrConflict):
		return refusedOtherInput
	case errors.Is(err, idempotency.ErrFull):
		return "" // counted where the call is refused
	case errors.Is(err, idempotency.ErrOutcomeUnknown):
		return refusedOutcomeUnknown
	case errors.Is(err, idempotency.ErrResultTooLarge):
		return refusedTooLarge
	case errors.Is(err, idempotency.ErrStillRunning), ctx.Err() != nil:
		return refusedStillRunning
	}
	return "" // the store is unreachable: counted where the call is refused
}

// warnUnprotected logs, at most every 10 s, that calls run without idempotency.
func (g *Gateway) warnUnprotected(err error) {
	if now := time.Now().UnixNano(); now-g.lastIdemWarn.Load() > int64(10*time.Second) {
		g.lastIdemWarn.Store(now)
		g.log.Warn("idempotency store unavailable; read-only and idempotent tools run without it, others are refused", "error", err)
	}
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
