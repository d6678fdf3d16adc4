package tool

import (
	"context"
	"net/url"
	"strconv"

	"google.golang.org/grpc/metadata"
)

// Metadata keys a caller sets on a tool call.
const (
	// CallIDKey carries the caller's call id (the idempotency key of the call).
	CallIDKey = "toolfleet-call-id"
	// TraceParentKey carries the W3C trace context (https://www.w3.org/TR/trace-context/).
	TraceParentKey = "traceparent"
	// TraceStateKey carries the W3C vendor trace state.
	TraceStateKey = "tracestate"
	// AcceptResultBytesKey carries the largest result (protobuf bytes) the caller
	// accepts, in decimal, when that is more than the contract's
	// max_result_bytes: the gateway sends it for a caller that allowed a result
	// handle, and keeps the large result instead of returning it inline.
	AcceptResultBytesKey = "toolfleet-accept-result-bytes"
	// PrincipalKey carries the subject the gateway authenticated for the call
	// ("anonymous" with auth off); on a delegated call, the subject acted for.
	// The value is percent-encoded UTF-8 (RFC 3986, as url.PathEscape writes it):
	// gRPC metadata values are printable ASCII, subjects need not be.
	PrincipalKey = "toolfleet-principal"
	// PrincipalViaKey carries, on a delegated call, the authenticated delegate
	// that made the call on behalf of PrincipalKey's subject (encoded the same way).
	PrincipalViaKey = "toolfleet-principal-via"
)

// acceptResultBytes is the caller's AcceptResultBytesKey, or 0 when absent or malformed.
func acceptResultBytes(ctx context.Context) int {
	n, err := strconv.Atoi(incoming(ctx, AcceptResultBytesKey))
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// CallID returns the caller's call id from the incoming metadata, or "".
func CallID(ctx context.Context) string { return incoming(ctx, CallIDKey) }

// Principal returns the subject the gateway authenticated for the call (for a
// delegated call, the one acted for) and the delegate that made it ("" for a
// direct call), from the incoming metadata. Trust them only when nothing but
// the gateway can reach the worker (the prod overlay's NetworkPolicy, mTLS):
// any other caller can set them.
func Principal(ctx context.Context) (subject, via string) {
	return unescape(incoming(ctx, PrincipalKey)), unescape(incoming(ctx, PrincipalViaKey))
}

// unescape decodes a percent-encoded value; a malformed one is returned as sent.
func unescape(v string) string {
	if u, err := url.PathUnescape(v); err == nil {
		return u
	}
	return v
}

// OutgoingPrincipal returns ctx with the principal set on the outgoing metadata
// of a call to a worker (see [Principal]); empty values are left out.
func OutgoingPrincipal(ctx context.Context, subject, via string) context.Context {
	var kv []string
	if subject != "" {
		kv = append(kv, PrincipalKey, url.PathEscape(subject))
	}
	if via != "" {
		kv = append(kv, PrincipalViaKey, url.PathEscape(via))
	}
	if len(kv) == 0 {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, kv...)
}

// TraceParent returns the W3C traceparent header from the incoming metadata, or "".
func TraceParent(ctx context.Context) string { return incoming(ctx, TraceParentKey) }

// TraceID returns the trace id part of the incoming traceparent, or "" when the
// header is absent or malformed.
func TraceID(ctx context.Context) string { return traceIDOf(TraceParent(ctx)) }

// OutgoingCallContext returns ctx with the call id and traceparent set on the
// outgoing metadata of a call to a worker; empty values are left out.
func OutgoingCallContext(ctx context.Context, callID, traceParent string) context.Context {
	var kv []string
	if callID != "" {
		kv = append(kv, CallIDKey, callID)
	}
	if traceParent != "" {
		kv = append(kv, TraceParentKey, traceParent)
	}
	if len(kv) == 0 {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, kv...)
}

func incoming(ctx context.Context, key string) string {
	if v := metadata.ValueFromIncomingContext(ctx, key); len(v) > 0 {
		return v[0]
	}
	return ""
}

// traceIDOf parses "version-traceid-parentid-flags" and returns the trace id.
func traceIDOf(tp string) string {
	// 2 + 1 + 32 + 1 + 16 + 1 + 2
	if len(tp) < 55 || tp[2] != '-' || tp[35] != '-' || tp[52] != '-' {
		return ""
	}
	id := tp[3:35]
	for _, c := range id {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return ""
		}
	}
	if id == "00000000000000000000000000000000" {
		return ""
	}
	return id
}
