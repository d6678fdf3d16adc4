package agentapi

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/gen/toolfleet/v1/toolfleetv1connect"
)

// Late is the AgentService for a server that starts before the orchestrator
// (the gateway, which the orchestrator calls tools through): mount its
// Handler and RegisterGRPC up front, Set the service once it exists; until
// then calls are Unavailable.
type Late struct {
	s atomic.Pointer[Service]
}

// Set makes s answer calls.
func (l *Late) Set(s *Service) { l.s.Store(s) }

// Pattern is the path prefix of the AgentService.
func (l *Late) Pattern() string { return "/" + toolfleetv1connect.AgentServiceName + "/" }

// ServeHTTP serves Connect, gRPC-Web and gRPC-over-net/http requests.
func (l *Late) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s := l.s.Load()
	if s == nil {
		http.Error(w, "the orchestrator is starting", http.StatusServiceUnavailable)
		return
	}
	_, h := s.Handler()
	h.ServeHTTP(w, r)
}

// RegisterGRPC registers the service on a grpc-go server.
func (l *Late) RegisterGRPC(r grpc.ServiceRegistrar) {
	toolfleetv1.RegisterAgentServiceServer(r, grpcServer{get: l.s.Load})
}

// grpcServer adapts Service to grpc-go: the same methods, auth from the
// authorization metadata, connect codes as gRPC codes (they are the same set).
type grpcServer struct {
	toolfleetv1.UnimplementedAgentServiceServer
	get func() *Service
}

func headerOf(ctx context.Context) http.Header {
	h := http.Header{}
	if v := metadata.ValueFromIncomingContext(ctx, "authorization"); len(v) > 0 {
		h.Set("Authorization", v[0])
	}
	return h
}

func grpcStatus(err error) error {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return status.Error(codes.Code(ce.Code()), ce.Message())
	}
	return err
}

func unary[Req, Resp any](ctx context.Context, s *Service, req *Req,
	fn func(*Service, context.Context, *connect.Request[Req]) (*connect.Response[Resp], error)) (*Resp, error) {
	if s == nil {
		return nil, status.Error(codes.Unavailable, "the orchestrator is starting")
	}
	r := connect.NewRequest(req)
	for k, v := range headerOf(ctx) {
		r.Header()[k] = v
	}
	resp, err := fn(s, ctx, r)
	if err != nil {
		return nil, grpcStatus(err)
	}
	return resp.Msg, nil
}

func (g grpcServer) StartRun(ctx context.Context, r *toolfleetv1.StartRunRequest) (*toolfleetv1.StartRunResponse, error) {
	return unary(ctx, g.get(), r, (*Service).StartRun)
}

func (g grpcServer) GetRun(ctx context.Context, r *toolfleetv1.GetRunRequest) (*toolfleetv1.GetRunResponse, error) {
	return unary(ctx, g.get(), r, (*Service).GetRun)
}

func (g grpcServer) ListRuns(ctx context.Context, r *toolfleetv1.ListRunsRequest) (*toolfleetv1.ListRunsResponse, error) {
	return unary(ctx, g.get(), r, (*Service).ListRuns)
}

func (g grpcServer) SendMessage(ctx context.Context, r *toolfleetv1.SendMessageRequest) (*toolfleetv1.SendMessageResponse, error) {
	return unary(ctx, g.get(), r, (*Service).SendMessage)
}

func (g grpcServer) DecideApproval(ctx context.Context, r *toolfleetv1.DecideApprovalRequest) (*toolfleetv1.DecideApprovalResponse, error) {
	return unary(ctx, g.get(), r, (*Service).DecideApproval)
}

func (g grpcServer) CancelRun(ctx context.Context, r *toolfleetv1.CancelRunRequest) (*toolfleetv1.CancelRunResponse, error) {
	return unary(ctx, g.get(), r, (*Service).CancelRun)
}

func (g grpcServer) WatchRun(r *toolfleetv1.WatchRunRequest, stream grpc.ServerStreamingServer[toolfleetv1.WatchRunResponse]) error {
	s := g.get()
	if s == nil {
		return status.Error(codes.Unavailable, "the orchestrator is starting")
	}
	return grpcStatus(s.watch(stream.Context(), headerOf(stream.Context()), r, stream.Send))
}
