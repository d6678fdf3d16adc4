package gateway

import (
	"context"
	"errors"
	"fmt"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/dynamicpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/services/gateway/idempotency"
	"github.com/toolfleet/toolfleet/services/gateway/registry"
)

// The idempotency step of the call pipeline: a caller's call_id claimed in the
// idempotency store (package idempotency), which is also the call journal
// (package sdk/tool/journal), and the answers a caller gets when a call ran,
// did not run, or may have run (docs/gateway.md, "Idempotency" and "Exactly once").

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
		if !errors.Is(err, idempotency.ErrOverShare) {
			g.warnUnprotected(err)
		}
		return nil, nil // a second run is harmless
	}
	if errors.Is(err, idempotency.ErrOverShare) {
		// This caller holds its share of the store (shares.go); other
		// callers' call_ids are still kept.
		g.metrics.idempotencyRefused.WithLabelValues(refusedOverShare).Inc()
		return nil, shareRefused(err, fmt.Sprintf("%s (neither read-only nor idempotent) with call_id %q", def.GetId(), req.GetCallId()),
			"it runs with a call_id only when its outcome can be kept for its retries: try again then")
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
