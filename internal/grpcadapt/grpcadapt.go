// Package grpcadapt serves a connect-go service implementation on grpc-go too.
//
// Services mounted at the gateway (AgentService, ProgramService) are written
// once as Connect handlers; real gRPC connections never reach net/http, so each
// also registers a thin grpc-go adapter built from these helpers: the caller's
// authorization metadata becomes the Connect request header, and Connect error
// codes become the identical gRPC codes.
package grpcadapt

import (
	"context"
	"errors"
	"net/http"

	"connectrpc.com/connect"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// ErrStarting is returned while the service behind an adapter is not set yet.
var ErrStarting = status.Error(codes.Unavailable, "the orchestrator is starting")

// Header carries the incoming authorization metadata as an HTTP header, the way
// a Connect handler reads it.
func Header(ctx context.Context) http.Header {
	h := http.Header{}
	if v := metadata.ValueFromIncomingContext(ctx, "authorization"); len(v) > 0 {
		h.Set("Authorization", v[0])
	}
	return h
}

// Status turns a *connect.Error into the gRPC status with the same code and
// message; other errors pass unchanged.
func Status(err error) error {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return status.Error(codes.Code(ce.Code()), ce.Message())
	}
	return err
}

// Unary calls a Connect-style method of s for a gRPC request. A nil s (the
// service is not started yet) is Unavailable.
func Unary[S, Req, Resp any](ctx context.Context, s *S, req *Req,
	fn func(*S, context.Context, *connect.Request[Req]) (*connect.Response[Resp], error)) (*Resp, error) {
	if s == nil {
		return nil, ErrStarting
	}
	r := connect.NewRequest(req)
	for k, v := range Header(ctx) {
		r.Header()[k] = v
	}
	resp, err := fn(s, ctx, r)
	if err != nil {
		return nil, Status(err)
	}
	return resp.Msg, nil
}
