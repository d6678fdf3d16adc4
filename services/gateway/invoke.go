package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/schema"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/sdk/tool/journal"
	"github.com/toolfleet/toolfleet/services/gateway/idempotency"
	"github.com/toolfleet/toolfleet/services/gateway/registry"
)

// resultJSON renders results with zero values, so a model sees "result": 0.
var resultJSON = protojson.MarshalOptions{EmitUnpopulated: true}

// attempt is how invoke sends a call: with its idempotency claim (nil for a
// call without a caller's call_id), and whether a worker that keeps the call
// journal is handed the claim (calls with side effects that running twice
// would repeat; the others need no record of whether they started).
type attempt struct {
	claim   *idempotency.Claim
	journal bool
	callID  string
	traceID string
	offer   handleOffer
}

// invokeResult is the outcome of invoke.
type invokeResult struct {
	out proto.Message
	// trailer is the worker's trailer of the last attempt (the call's caller
	// log among it: callerLogs).
	trailer metadata.MD
	// reached: the last attempt may have reached a worker, which may have run
	// the tool (a worker without a journal, or a store that did not answer).
	reached bool
	// started: a worker recorded the call's start and its answer was lost: the
	// journal will tell (Claim.Await).
	started bool
	// lost: a retry took the call over before a worker started it here.
	lost bool
	// journaled: the answer is the worker's, recorded in the call journal.
	journaled bool
	err       error
}

// invoke calls the tool on one replica, falling back to the next replica only
// when the call did not start on the first. With a handle offer, the
// worker's answer may be as large as a result kept behind a handle.
//
// Whether a failed attempt started is read from facts: a worker that keeps
// the call journal answers with its record's revision (journal.FinishedTrailer)
// or says it did not start (journal.NotStartedTrailer); when its answer is
// lost, the claim is fenced (Claim.Fence), which either proves the attempt
// never started — and never will — or finds the worker's start. Without a
// journal, only a refused connection or a draining worker's refusal shows
// that a call did not reach a worker.
func (g *Gateway) invoke(ctx context.Context, rt *registry.Route, in proto.Message, a attempt) invokeResult {
	timeout := rt.Def().GetRequirements().GetTimeout().AsDuration()
	if timeout <= 0 {
		timeout = g.cfg.DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout) // capped by the caller's deadline
	defer cancel()
	ctx = tool.OutgoingCallContext(ctx, a.callID, outgoingTraceParent(ctx, a.traceID))
	ctx, opts := g.withOffer(ctx, a.offer)
	replicas := rt.Pick()
	if len(replicas) == 0 {
		// Every replica is draining: the tool is still known, and a retry may find
		// a replica that took over (or the restarted worker).
		return invokeResult{err: status.Errorf(codes.Unavailable, "every replica serving %s is draining", rt.Def().GetId())}
	}
	var r invokeResult
	for i, w := range replicas {
		r = g.invokeOne(ctx, rt, w, in, a, opts)
		if r.err == nil || r.started || r.lost || r.reached || ctx.Err() != nil || status.Code(r.err) != codes.Unavailable {
			break
		}
		g.log.Warn("replica unreachable, the call did not start there; trying the next", "tool", rt.Def().GetId(), "addr", w.Addr(), "attempt", i+1, "error", r.err)
	}
	return r
}

// invokeOne makes one attempt on replica w.
func (g *Gateway) invokeOne(ctx context.Context, rt *registry.Route, w *registry.Replica, in proto.Message, a attempt, opts []grpc.CallOption) invokeResult {
	journaled := a.journal && a.claim.Owned() && w.CallJournal()
	if a.claim.Owned() && !journaled {
		if a.journal {
			// The lock said every replica keeps a journal; this one does not.
			if err := a.claim.MarkUnjournaled(ctx); err != nil {
				return invokeResult{err: status.Errorf(codes.Unavailable, "the call to %s was not sent: %v", rt.Def().GetId(), err)}
			}
		}
		// Only the gateway can show a retry that the call is alive.
		stop := a.claim.KeepAlive()
		defer stop()
	}
	if journaled {
		ctx = metadata.AppendToOutgoingContext(ctx, journal.ClaimKey, a.claim.Journal().String())
	}
	wasReady := w.Conn().GetState() == connectivity.Ready
	out := dynamicpb.NewMessage(rt.Method().Output())
	var trailer metadata.MD
	err := w.Conn().Invoke(ctx, rt.Def().GetGrpcMethod(), in, out, append(opts[:len(opts):len(opts)], grpc.Trailer(&trailer))...)
	r := invokeResult{trailer: trailer, err: err}
	if journaled {
		if rev, perr := strconv.ParseUint(lastOf(trailer, journal.FinishedTrailer), 10, 64); perr == nil {
			a.claim.Advance(rev) // the worker's record of its answer: stored over
			r.journaled = true
		} else if err == nil {
			a.claim.WorkerAnswered()
		}
	}
	if err == nil {
		r.out = out
		return r
	}
	notStarted := len(trailer.Get(tool.DrainingTrailer)) > 0 // refused before any tool code
	switch {
	case !journaled:
	case lastOf(trailer, journal.NotStartedTrailer) == journal.ClaimLost:
		r.lost = true
		return r
	case lastOf(trailer, journal.NotStartedTrailer) != "":
		notStarted = true
	case lastOf(trailer, journal.FinishedTrailer) != "":
		return r // the worker's own answer, recorded
	default:
		// The answer was lost, or the worker refused before its journal (an
		// invalid input): did the worker start it?
		switch ferr := a.claim.Fence(ctx); {
		case ferr == nil:
			notStarted = true // and it never will: its start expects the old revision
		case errors.Is(ferr, idempotency.ErrStarted):
			r.started = true
			return r
		default:
			g.log.Warn("whether a call started is unknown: the idempotency store did not answer", "tool", rt.Def().GetId(), "error", ferr)
			r.reached = true
			return r
		}
	}
	// Without a journal, a call reached no worker only when the connection was
	// never up (refused, replica gone), or when a draining worker refused it.
	r.reached = !notStarted && !(status.Code(err) == codes.Unavailable && (!wasReady || neverConnected(err)))
	return r
}

// lastOf is the last value of key in md, or "".
func lastOf(md metadata.MD, key string) string {
	v := md.Get(key)
	if len(v) == 0 {
		return ""
	}
	return v[len(v)-1]
}

// callerLogs copies the lines a tool logged for its caller (the worker's
// tool.LogTrailer) into resp, within the SDK's bounds whatever the worker
// sent: a malformed trailer is dropped, lines past the bounds are counted.
func callerLogs(trailer metadata.MD, resp *toolfleetv1.CallToolResponse) {
	v := trailer.Get(tool.LogTrailer)
	if len(v) == 0 {
		return
	}
	var logs toolfleetv1.ToolLogs
	if proto.Unmarshal([]byte(v[len(v)-1]), &logs) != nil {
		return
	}
	resp.LogsDropped = logs.GetDropped()
	size := 0
	for _, l := range logs.GetLines() {
		msg := l.GetMessage()
		if len(resp.Logs) >= tool.MaxCallerLogLines || size+len(msg) > tool.MaxCallerLogBytes || !utf8.ValidString(msg) {
			resp.LogsDropped++
			continue
		}
		size += len(msg)
		if _, known := toolfleetv1.ToolLogLevel_name[int32(l.GetLevel())]; !known || l.GetLevel() == toolfleetv1.ToolLogLevel_TOOL_LOG_LEVEL_UNSPECIFIED {
			l.Level = toolfleetv1.ToolLogLevel_TOOL_LOG_LEVEL_INFO
		}
		resp.Logs = append(resp.Logs, l)
	}
}

// outcomeUnknown reports a failure after which the tool may have run: the
// worker went away mid-call, or the call ran out of time or was cancelled
// while the worker had it. A worker's own refusal (invalid input, a failed
// precondition, …) is an answer: the tool did not run.
func outcomeUnknown(reached bool, err error) bool {
	if !reached || err == nil {
		return false
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.Unknown, codes.Internal:
		return true
	}
	return false
}

// neverConnected reports an Unavailable error from a dial that failed (grpc-go
// names it "Error while dialing"): grpc-go already retried transparently on a new
// connection, which could not be made, so the request reached no worker.
func neverConnected(err error) bool {
	return strings.Contains(status.Convert(err).Message(), "Error while dialing")
}

// mapResult turns the worker's answer into a response (value or execution error)
// or a CallError (validation, or a server error when the worker was unreachable
// or too slow).
//
// A result over the tool's limit is an execution error, or, with the caller's
// offer of a handle, kept behind a handle (handles.go).
func (g *Gateway) mapResult(ctx context.Context, rt *registry.Route, out proto.Message, err error, resp *toolfleetv1.CallToolResponse, offer handleOffer) *CallError {
	if err == nil {
		limit := g.resultLimit(rt)
		// A flat result whose JSON cannot exceed the limit needs no JSON at all.
		v, bound := scalarResult(out)
		if v == nil || bound > limit {
			b, merr := resultJSON.Marshal(out)
			if merr != nil {
				return serverError(codes.Internal, merr, merr.Error(), "the gateway could not encode the result of %s", rt.Def().GetId())
			}
			if int64(len(b)) > limit && offer.owner != "" {
				if md := out.ProtoReflect().Descriptor(); int64(len(b)) <= g.cfg.Results.MaxResultBytes && schema.ReachesEnum(md) {
					b = modelEnums(md, b) // a handle's bytes read as the inline result would
				}
				g.keepResult(ctx, rt, offer, b, limit, resp)
				return nil
			}
			if int64(len(b)) > limit {
				setToolError(resp, &toolfleetv1.ToolError{
					Message: fmt.Sprintf("the result of %s is %d bytes, over its limit of %d bytes; ask for less (narrow the input or page through the results)",
						rt.Def().GetId(), len(b), limit),
				})
				return nil
			}
			if v == nil {
				v = &structpb.Value{}
				if uerr := protojson.Unmarshal(b, v); uerr != nil {
					return serverError(codes.Internal, uerr, uerr.Error(), "the gateway could not encode the result of %s", rt.Def().GetId())
				}
				// Enum values read as the output schema offers them (low, not PRIORITY_LOW).
				schema.ResultToModel(out.ProtoReflect().Descriptor(), v)
			}
		}
		resp.Success = true
		resp.Outcome = &toolfleetv1.CallToolResponse_Value{Value: v}
		return nil
	}
	if te, ok := tool.AsToolError(err); ok {
		setToolError(resp, te)
		return nil
	}
	if ve, ok := tool.AsValidationError(err); ok {
		return validationError(ve)
	}
	st := status.Convert(err)
	id := rt.Def().GetId()
	switch st.Code() {
	case codes.DeadlineExceeded:
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return serverError(codes.DeadlineExceeded, ErrDeadline, st.Message(), "the caller's deadline passed before %s answered", id)
		}
		return serverError(codes.DeadlineExceeded, ErrDeadline, st.Message(), "%s did not answer within its timeout", id)
	case codes.Canceled:
		return serverError(codes.Canceled, ctx.Err(), st.Message(), "the call to %s was cancelled", id)
	case codes.Unavailable:
		return serverError(codes.Unavailable, ErrWorkerUnavailable, st.Message(), "no worker serving %s could be reached; try again later", id)
	case codes.Unimplemented, codes.ResourceExhausted:
		return serverError(st.Code(), ErrWorkerUnavailable, st.Message(), "the worker serving %s could not take the call", id)
	case codes.Internal, codes.Unknown, codes.DataLoss:
		// The tool ran and failed without saying why (e.g. a recovered panic).
		// Its status text may be raw Go error or panic text: logs only.
		errID := newErrorID()
		g.log.WarnContext(ctx, "tool failed without a tool error", "tool_id", id, "code", st.Code().String(), "error", st.Message(), "error_id", errID)
		setToolError(resp, &toolfleetv1.ToolError{Message: fmt.Sprintf("%s failed unexpectedly (error id %s)", id, errID),
			DeveloperMessage: "error id " + errID + "; the gateway's logs have the worker's status text"})
		return nil
	default:
		// Any other status from a plain gRPC service is the tool's own answer.
		setToolError(resp, &toolfleetv1.ToolError{Message: st.Message(), CanRetry: st.Code() == codes.Aborted,
			DeveloperMessage: "gRPC status " + st.Code().String()})
		return nil
	}
}

// modelEnums rewrites the enum values of a result's protojson b to their
// model names (schema.ResultToModel); b itself when it cannot.
func modelEnums(md protoreflect.MessageDescriptor, b []byte) []byte {
	v := &structpb.Value{}
	if protojson.Unmarshal(b, v) != nil {
		return b
	}
	schema.ResultToModel(md, v)
	out, err := protojson.Marshal(v)
	if err != nil {
		return b
	}
	return out
}

func setToolError(resp *toolfleetv1.CallToolResponse, te *toolfleetv1.ToolError) {
	resp.Success = false
	resp.Outcome = &toolfleetv1.CallToolResponse_Error{Error: te}
}

func (g *Gateway) resultLimit(rt *registry.Route) int64 {
	if n := rt.Def().GetRequirements().GetMaxResultBytes(); n > 0 {
		return n
	}
	return g.cfg.MaxResultBytes
}

// traceParent builds a W3C traceparent from a caller's trace id ("" when invalid).
func traceParent(traceID string) string {
	if len(traceID) != 32 {
		return ""
	}
	if _, err := hex.DecodeString(traceID); err != nil {
		return ""
	}
	var span [8]byte
	_, _ = rand.Read(span[:])
	return "00-" + traceID + "-" + hex.EncodeToString(span[:]) + "-01"
}

// newID returns a random 128-bit id in hex (call ids and event ids).
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
