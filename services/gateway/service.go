package gateway

import (
	"context"
	"net/http"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	rpbv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	rpbv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/gen/toolfleet/v1/toolfleetv1connect"
)

// grpcService serves ToolGatewayService with grpc-go (the fast path for the
// gRPC protocol).
type grpcService struct {
	toolfleetv1.UnimplementedToolGatewayServiceServer
	g *Gateway
}

// connectService serves ToolGatewayService with connect-go (Connect, gRPC-Web).
type connectService struct{ g *Gateway }

var _ toolfleetv1connect.ToolGatewayServiceHandler = connectService{}

// streamWorkers is how many goroutines serve gRPC streams. A call's handler runs
// the whole pipeline and grows its goroutine's stack to several KiB; grpc-go
// starts a goroutine per stream by default, so every call paid for that growth
// (runtime.copystack was ≈ 8 % of the benchmark's CPU). Workers keep their grown
// stacks; when all are busy grpc-go falls back to a goroutine per stream.
const streamWorkers = 64

func (g *Gateway) newGRPCServer() (*grpc.Server, *health.Server) {
	s := grpc.NewServer(append(g.grpcTraceOptions(),
		grpc.NumStreamWorkers(streamWorkers),
		grpc.ForceServerCodecV2(newLenientCodec()), // see badmessage.go
		// A message's length prefix is checked before it is read (limits.go).
		grpc.MaxRecvMsgSize(int(g.cfg.MaxRequestBytes)),
		grpc.MaxConcurrentStreams(g.cfg.MaxConcurrentStreams),
		grpc.MaxHeaderListSize(maxHeaderBytes),
		// An oversized Authorization is refused before the message is read (authbound.go).
		grpc.InTapHandle(tapAuthorization),
		grpc.KeepaliveEnforcementPolicy(keepaliveEnforcement),
		grpc.KeepaliveParams(keepaliveParams),
		grpc.ChainUnaryInterceptor(g.recoverUnary),
		grpc.ChainStreamInterceptor(g.recoverStream),
		// Mounted services' calls go to their own handlers (mountgrpc.go).
		grpc.UnknownServiceHandler(g.serveMount),
	)...)
	toolfleetv1.RegisterToolGatewayServiceServer(badMessageRegistrar{s}, grpcService{g: g})
	hs := health.NewServer()
	hs.SetServingStatus(toolfleetv1.ToolGatewayService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	if g.cfg.NATSURL != "" {
		// The server as a whole ("", what readiness probes ask) is ready once the
		// NATS stream and bucket exist (see connectNATS); liveness asks the service.
		hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	}
	healthpb.RegisterHealthServer(s, hs)
	// Reflection lists the mounted services too (served through serveMount).
	services := reflection.ServerOptions{Services: reflected{s: s, mounts: g.cfg.Mounts}}
	rpbv1.RegisterServerReflectionServer(s, reflection.NewServerV1(services))
	rpbv1alpha.RegisterServerReflectionServer(s, reflection.NewServer(services))
	return s, hs
}

func bearerFromMD(ctx context.Context) string {
	if v := metadata.ValueFromIncomingContext(ctx, "authorization"); len(v) > 0 {
		return v[0]
	}
	return ""
}

// credentialsFromMD reads the caller's credentials from gRPC metadata.
func credentialsFromMD(ctx context.Context) Credentials {
	first := func(k string) string {
		if v := metadata.ValueFromIncomingContext(ctx, k); len(v) > 0 {
			return v[0]
		}
		return ""
	}
	return Credentials{Authorization: first("authorization"), OnBehalfOf: first(HeaderOnBehalfOf), OnBehalfScopes: first(HeaderOnBehalfScopes)}
}

// credentialsOf reads the caller's credentials from HTTP headers (Connect,
// gRPC-Web, OXP HTTP, MCP); a nil header has none.
func credentialsOf(h http.Header) Credentials {
	return Credentials{Authorization: h.Get("Authorization"), OnBehalfOf: h.Get(HeaderOnBehalfOf), OnBehalfScopes: h.Get(HeaderOnBehalfScopes)}
}

// grpcErr renders pipeline errors as gRPC statuses (a CallError carries its detail).
func grpcErr(err error) error {
	if err == nil {
		return nil
	}
	return asCallError(err).GRPCStatus().Err()
}

// connectErr renders pipeline errors as connect errors.
func connectErr(err error) error {
	if err == nil {
		return nil
	}
	return asCallError(err).ConnectError()
}

// authenticated authenticates a call (applying delegation), then runs it.
func (g *Gateway) authenticated(ctx context.Context, creds Credentials, req *toolfleetv1.CallToolRequest) (*toolfleetv1.CallToolResponse, error) {
	p, err := g.auth.Principal(ctx, creds)
	if err != nil {
		ce := authError(err)
		ce.CallID = req.GetCallId()
		g.metrics.count(g.metrics.tool(unresolved), KindServer)
		return nil, ce
	}
	return g.Call(ctx, p, req)
}

func (g *Gateway) callMany(ctx context.Context, creds Credentials, req *toolfleetv1.CallToolsRequest) (*toolfleetv1.CallToolsResponse, error) {
	p, err := g.auth.Principal(ctx, creds)
	if err != nil {
		return nil, authError(err)
	}
	if ce := g.checkBatch(len(req.GetCalls())); ce != nil {
		return nil, ce
	}
	return &toolfleetv1.CallToolsResponse{Outcomes: g.CallMany(ctx, p, req.GetCalls())}, nil
}

// discover runs a discovery RPC for any authenticated caller (no scope needed).
func discover[Req, Resp any](ctx context.Context, g *Gateway, header string, req Req, f func(Req) (Resp, error)) (Resp, error) {
	if _, err := g.auth.Authenticate(ctx, header); err != nil {
		var zero Resp
		return zero, authError(err)
	}
	return f(req)
}

// discoverFor runs a listing for an authenticated caller (delegation applied),
// showing what that principal may call.
func discoverFor[Req, Resp any](ctx context.Context, g *Gateway, creds Credentials, req Req, f func(*Principal, Req) (Resp, error)) (Resp, error) {
	p, err := g.auth.Principal(ctx, creds)
	if err != nil {
		var zero Resp
		return zero, authError(err)
	}
	return f(p, req)
}

func (s grpcService) ListTools(ctx context.Context, req *toolfleetv1.ListToolsRequest) (*toolfleetv1.ListToolsResponse, error) {
	resp, err := discoverFor(ctx, s.g, credentialsFromMD(ctx), req, s.g.ListToolsFor)
	return resp, grpcErr(err)
}

func (s grpcService) GetTool(ctx context.Context, req *toolfleetv1.GetToolRequest) (*toolfleetv1.GetToolResponse, error) {
	resp, err := discover(ctx, s.g, bearerFromMD(ctx), req, s.g.GetTool)
	return resp, grpcErr(err)
}

func (s grpcService) SearchTools(ctx context.Context, req *toolfleetv1.SearchToolsRequest) (*toolfleetv1.SearchToolsResponse, error) {
	resp, err := discoverFor(ctx, s.g, credentialsFromMD(ctx), req, s.g.SearchToolsFor)
	return resp, grpcErr(err)
}

func (s grpcService) CallTool(ctx context.Context, req *toolfleetv1.CallToolRequest) (*toolfleetv1.CallToolResponse, error) {
	resp, err := s.g.authenticated(ctx, credentialsFromMD(ctx), req)
	return resp, grpcErr(err)
}

func (s grpcService) CallTools(ctx context.Context, req *toolfleetv1.CallToolsRequest) (*toolfleetv1.CallToolsResponse, error) {
	resp, err := s.g.callMany(ctx, credentialsFromMD(ctx), req)
	return resp, grpcErr(err)
}

func (s connectService) ListTools(ctx context.Context, req *connect.Request[toolfleetv1.ListToolsRequest]) (*connect.Response[toolfleetv1.ListToolsResponse], error) {
	return wrap(discoverFor(ctx, s.g, credentialsOf(req.Header()), req.Msg, s.g.ListToolsFor))
}

func (s connectService) GetTool(ctx context.Context, req *connect.Request[toolfleetv1.GetToolRequest]) (*connect.Response[toolfleetv1.GetToolResponse], error) {
	return wrap(discover(ctx, s.g, req.Header().Get("Authorization"), req.Msg, s.g.GetTool))
}

func (s connectService) SearchTools(ctx context.Context, req *connect.Request[toolfleetv1.SearchToolsRequest]) (*connect.Response[toolfleetv1.SearchToolsResponse], error) {
	return wrap(discoverFor(ctx, s.g, credentialsOf(req.Header()), req.Msg, s.g.SearchToolsFor))
}

func (s connectService) CallTool(ctx context.Context, req *connect.Request[toolfleetv1.CallToolRequest]) (*connect.Response[toolfleetv1.CallToolResponse], error) {
	return wrap(s.g.authenticated(ctx, credentialsOf(req.Header()), req.Msg))
}

func (s connectService) CallTools(ctx context.Context, req *connect.Request[toolfleetv1.CallToolsRequest]) (*connect.Response[toolfleetv1.CallToolsResponse], error) {
	return wrap(s.g.callMany(ctx, credentialsOf(req.Header()), req.Msg))
}

func wrap[T any](msg *T, err error) (*connect.Response[T], error) {
	if err != nil {
		return nil, connectErr(err)
	}
	return connect.NewResponse(msg), nil
}
