package program

import (
	"context"
	"errors"
	"net/http"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// RegisterGRPC registers the ProgramService on a grpc-go server (the
// gateway's, through its mount hook): gRPC connections never reach net/http.
// The adapter mirrors agentapi's for the AgentService.
func (l *Late) RegisterGRPC(r grpc.ServiceRegistrar) {
	toolfleetv1.RegisterProgramServiceServer(r, grpcServer{get: l.s.Load})
}

// grpcServer adapts Service to grpc-go: the same methods, auth from the
// authorization metadata, connect codes as gRPC codes (the same set).
type grpcServer struct {
	toolfleetv1.UnimplementedProgramServiceServer
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

func (g grpcServer) RunProgram(ctx context.Context, r *toolfleetv1.RunProgramRequest) (*toolfleetv1.RunProgramResponse, error) {
	return unary(ctx, g.get(), r, (*Service).RunProgram)
}

func (g grpcServer) GetProgram(ctx context.Context, r *toolfleetv1.GetProgramRequest) (*toolfleetv1.GetProgramResponse, error) {
	return unary(ctx, g.get(), r, (*Service).GetProgram)
}

func (g grpcServer) CancelProgram(ctx context.Context, r *toolfleetv1.CancelProgramRequest) (*toolfleetv1.CancelProgramResponse, error) {
	return unary(ctx, g.get(), r, (*Service).CancelProgram)
}

func (g grpcServer) DecideProgramApproval(ctx context.Context, r *toolfleetv1.DecideProgramApprovalRequest) (*toolfleetv1.DecideProgramApprovalResponse, error) {
	return unary(ctx, g.get(), r, (*Service).DecideProgramApproval)
}

func (g grpcServer) ListTriggers(ctx context.Context, r *toolfleetv1.ListTriggersRequest) (*toolfleetv1.ListTriggersResponse, error) {
	return unary(ctx, g.get(), r, (*Service).ListTriggers)
}

func (g grpcServer) WatchProgram(r *toolfleetv1.WatchProgramRequest, stream grpc.ServerStreamingServer[toolfleetv1.WatchProgramResponse]) error {
	s := g.get()
	if s == nil {
		return status.Error(codes.Unavailable, "the orchestrator is starting")
	}
	return grpcStatus(s.watch(stream.Context(), headerOf(stream.Context()), r, stream.Send))
}
