package agentapi

import (
	"context"

	"google.golang.org/grpc"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/gen/toolfleet/v1/toolfleetv1connect"
	"github.com/toolfleet/toolfleet/internal/grpcadapt"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall/apibase"
)

// Late is the AgentService for a server that starts before the orchestrator
// (the gateway, which the orchestrator calls tools through): mount its
// Handler and RegisterGRPC up front, Set the service once it exists; until
// then calls are Unavailable.
type Late struct {
	apibase.Late[Service, *Service]
}

// Pattern is the path prefix of the AgentService.
func (l *Late) Pattern() string { return "/" + toolfleetv1connect.AgentServiceName + "/" }

// RegisterGRPC registers the service on a grpc-go server.
func (l *Late) RegisterGRPC(r grpc.ServiceRegistrar) {
	toolfleetv1.RegisterAgentServiceServer(r, grpcServer{get: l.Get})
}

// grpcServer adapts Service to grpc-go: the same methods, auth from the
// authorization metadata, connect codes as gRPC codes (they are the same set).
type grpcServer struct {
	toolfleetv1.UnimplementedAgentServiceServer
	get func() *Service
}

func (g grpcServer) StartRun(ctx context.Context, r *toolfleetv1.StartRunRequest) (*toolfleetv1.StartRunResponse, error) {
	return grpcadapt.Unary(ctx, g.get(), r, (*Service).StartRun)
}

func (g grpcServer) GetRun(ctx context.Context, r *toolfleetv1.GetRunRequest) (*toolfleetv1.GetRunResponse, error) {
	return grpcadapt.Unary(ctx, g.get(), r, (*Service).GetRun)
}

func (g grpcServer) ListRuns(ctx context.Context, r *toolfleetv1.ListRunsRequest) (*toolfleetv1.ListRunsResponse, error) {
	return grpcadapt.Unary(ctx, g.get(), r, (*Service).ListRuns)
}

func (g grpcServer) SendMessage(ctx context.Context, r *toolfleetv1.SendMessageRequest) (*toolfleetv1.SendMessageResponse, error) {
	return grpcadapt.Unary(ctx, g.get(), r, (*Service).SendMessage)
}

func (g grpcServer) DecideApproval(ctx context.Context, r *toolfleetv1.DecideApprovalRequest) (*toolfleetv1.DecideApprovalResponse, error) {
	return grpcadapt.Unary(ctx, g.get(), r, (*Service).DecideApproval)
}

func (g grpcServer) AnswerInput(ctx context.Context, r *toolfleetv1.AnswerInputRequest) (*toolfleetv1.AnswerInputResponse, error) {
	return grpcadapt.Unary(ctx, g.get(), r, (*Service).AnswerInput)
}

func (g grpcServer) CancelRun(ctx context.Context, r *toolfleetv1.CancelRunRequest) (*toolfleetv1.CancelRunResponse, error) {
	return grpcadapt.Unary(ctx, g.get(), r, (*Service).CancelRun)
}

func (g grpcServer) WatchRun(r *toolfleetv1.WatchRunRequest, stream grpc.ServerStreamingServer[toolfleetv1.WatchRunResponse]) error {
	return apibase.Stream(stream.Context(), g.get(), r, stream.Send, (*Service).watch)
}
