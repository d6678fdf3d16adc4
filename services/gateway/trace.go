package gateway

import (
	"context"
	"net/http"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/toolfleet/toolfleet/internal/telemetry"
)

// Trace context. The caller's W3C traceparent (gRPC metadata or HTTP header)
// is always honoured: it is the parent of what the gateway sends the worker
// and of the call's events. With Config.Tracing the gateway also records its
// own spans (server, and client towards the worker) with the global
// TracerProvider (internal/telemetry); without it, nothing is recorded and the
// caller's context passes through unchanged.

// grpcTraceOptions extract the caller's trace context on the gRPC surface.
func (g *Gateway) grpcTraceOptions() []grpc.ServerOption {
	if g.cfg.Tracing {
		return []grpc.ServerOption{grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithPropagators(telemetry.Propagator)))}
	}
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
		if md, ok := metadata.FromIncomingContext(ctx); ok && len(md.Get("traceparent")) > 0 {
			ctx = telemetry.Propagator.Extract(ctx, metadataCarrier(md))
		}
		return next(ctx, req)
	})}
}

// traceHTTP extracts the caller's trace context on the HTTP surfaces
// (Connect, gRPC-Web, OXP, MCP).
func (g *Gateway) traceHTTP(next http.Handler) http.Handler {
	if g.cfg.Tracing {
		return otelhttp.NewHandler(next, "gateway", otelhttp.WithPropagators(telemetry.Propagator),
			otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method + " " + r.URL.Path }))
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("traceparent") != "" {
			r = r.WithContext(telemetry.Propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header)))
		}
		next.ServeHTTP(w, r)
	})
}

// workerTraceOptions record the gateway's calls to workers as client spans.
func (g *Gateway) workerTraceOptions() []grpc.DialOption {
	if !g.cfg.Tracing {
		return nil
	}
	return []grpc.DialOption{grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithPropagators(telemetry.Propagator)))}
}

// outgoingTraceParent is the traceparent for the worker and the events: the
// context's span (the caller's, or the gateway's own when tracing), else one
// made from the request's trace_id field.
func outgoingTraceParent(ctx context.Context, traceID string) string {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + sc.TraceFlags().String()
	}
	return traceParent(traceID)
}

// traceIDOf is the trace id of the context's span, or "".
func traceIDOf(ctx context.Context) string {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		return sc.TraceID().String()
	}
	return ""
}

// metadataCarrier reads gRPC metadata for the propagator.
type metadataCarrier metadata.MD

func (c metadataCarrier) Get(key string) string {
	if v := metadata.MD(c).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c metadataCarrier) Set(key, value string) { metadata.MD(c).Set(key, value) }

func (c metadataCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
