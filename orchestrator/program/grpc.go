package program

import (
	"context"

	"google.golang.org/grpc"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/internal/grpcadapt"
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

func (g grpcServer) RunProgram(ctx context.Context, r *toolfleetv1.RunProgramRequest) (*toolfleetv1.RunProgramResponse, error) {
	return grpcadapt.Unary(ctx, g.get(), r, (*Service).RunProgram)
}

func (g grpcServer) GetProgram(ctx context.Context, r *toolfleetv1.GetProgramRequest) (*toolfleetv1.GetProgramResponse, error) {
	return grpcadapt.Unary(ctx, g.get(), r, (*Service).GetProgram)
}

func (g grpcServer) CancelProgram(ctx context.Context, r *toolfleetv1.CancelProgramRequest) (*toolfleetv1.CancelProgramResponse, error) {
	return grpcadapt.Unary(ctx, g.get(), r, (*Service).CancelProgram)
}

func (g grpcServer) DecideProgramApproval(ctx context.Context, r *toolfleetv1.DecideProgramApprovalRequest) (*toolfleetv1.DecideProgramApprovalResponse, error) {
	return grpcadapt.Unary(ctx, g.get(), r, (*Service).DecideProgramApproval)
}

func (g grpcServer) ListTriggers(ctx context.Context, r *toolfleetv1.ListTriggersRequest) (*toolfleetv1.ListTriggersResponse, error) {
	return grpcadapt.Unary(ctx, g.get(), r, (*Service).ListTriggers)
}

func (g grpcServer) WatchProgram(r *toolfleetv1.WatchProgramRequest, stream grpc.ServerStreamingServer[toolfleetv1.WatchProgramResponse]) error {
	s := g.get()
	if s == nil {
		return grpcadapt.ErrStarting
	}
	return grpcadapt.Status(s.watch(stream.Context(), grpcadapt.Header(stream.Context()), r, stream.Send))
}
