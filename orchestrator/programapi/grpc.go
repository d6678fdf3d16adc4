package programapi

import (
	"context"

	"google.golang.org/grpc"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/gen/toolfleet/v1/toolfleetv1connect"
	"github.com/toolfleet/toolfleet/internal/grpcadapt"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall/apibase"
)

// Late is the ProgramService for a server that starts before the
// orchestrator (the gateway): mount it up front (Connect, gRPC-Web, HTTP JSON
// and grpc-go), Set the service once it exists; until then calls are
// Unavailable.
type Late struct {
	apibase.Late[Service, *Service]
}

// Pattern is the path prefix of the ProgramService.
func (l *Late) Pattern() string { return "/" + toolfleetv1connect.ProgramServiceName + "/" }

// RegisterGRPC registers the ProgramService on a grpc-go server (the
// gateway's, through its mount hook): gRPC connections never reach net/http.
func (l *Late) RegisterGRPC(r grpc.ServiceRegistrar) {
	toolfleetv1.RegisterProgramServiceServer(r, grpcServer{get: l.Get})
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

func (g grpcServer) AnswerProgramInput(ctx context.Context, r *toolfleetv1.AnswerProgramInputRequest) (*toolfleetv1.AnswerInputResponse, error) {
	return grpcadapt.Unary(ctx, g.get(), r, (*Service).AnswerProgramInput)
}

func (g grpcServer) DecideProgramApproval(ctx context.Context, r *toolfleetv1.DecideProgramApprovalRequest) (*toolfleetv1.DecideProgramApprovalResponse, error) {
	return grpcadapt.Unary(ctx, g.get(), r, (*Service).DecideProgramApproval)
}

func (g grpcServer) ListPrograms(ctx context.Context, r *toolfleetv1.ListProgramsRequest) (*toolfleetv1.ListProgramsResponse, error) {
	return grpcadapt.Unary(ctx, g.get(), r, (*Service).ListPrograms)
}

func (g grpcServer) ListTriggers(ctx context.Context, r *toolfleetv1.ListTriggersRequest) (*toolfleetv1.ListTriggersResponse, error) {
	return grpcadapt.Unary(ctx, g.get(), r, (*Service).ListTriggers)
}

func (g grpcServer) WatchProgram(r *toolfleetv1.WatchProgramRequest, stream grpc.ServerStreamingServer[toolfleetv1.WatchProgramResponse]) error {
	return apibase.Stream(stream.Context(), g.get(), r, stream.Send, (*Service).watch)
}
