package gateway

import (
	"context"
	"fmt"
	"net/http"
	"runtime/debug"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/toolfleet/toolfleet/services/gateway/oxp"
)

// A panic in any handler becomes a sealed Internal server error: the caller
// gets a generic message and an error id, the log gets the panic value and the
// stack under that id, and the process keeps serving.

// panicError logs a recovered panic and returns the caller's error.
func (g *Gateway) panicError(ctx context.Context, v any, where string) *CallError {
	ce := serverError(codes.Internal, nil, fmt.Sprint(v), "the gateway failed to handle the request")
	g.log.ErrorContext(ctx, "recovered a panic in a handler", "where", where, "error_id", ce.ErrorID,
		"panic", fmt.Sprint(v), "stack", string(debug.Stack()))
	return ce
}

// recoverHTTP guards the net/http surfaces (OXP, MCP, metrics).
func (g *Gateway) recoverHTTP(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler {
				panic(v) // net/http's own way to abort a response
			}
			// If the handler already wrote a status this body is cut short;
			// the client still sees a broken response, never a panic text.
			oxp.WriteJSON(w, http.StatusInternalServerError, oxp.FailureBody(g.panicError(r.Context(), v, r.URL.Path).Failure()))
		}()
		next.ServeHTTP(w, r)
	})
}

// connectRecover guards connect-go handlers (Connect, gRPC-Web, reflection).
func (g *Gateway) connectRecover() connect.HandlerOption {
	return connect.WithRecover(func(ctx context.Context, spec connect.Spec, _ http.Header, v any) error {
		return g.panicError(ctx, v, spec.Procedure).ConnectError()
	})
}

// recoverUnary guards grpc-go unary handlers.
func (g *Gateway) recoverUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if v := recover(); v != nil {
			resp, err = nil, g.panicError(ctx, v, info.FullMethod).GRPCStatus().Err()
		}
	}()
	return h(ctx, req)
}

// recoverStream guards grpc-go streaming handlers (health watch, reflection).
func (g *Gateway) recoverStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = g.panicError(ss.Context(), v, info.FullMethod).GRPCStatus().Err()
		}
	}()
	return h(srv, ss)
}
