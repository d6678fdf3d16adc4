package connections

import (
	"context"
	"errors"
	"net/http"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/gen/toolfleet/v1/toolfleetv1connect"
	"github.com/toolfleet/toolfleet/internal/grpcadapt"
)

// Authenticator returns the subject of a request's caller from its headers
// (Authorization), or an error for a caller that is not authenticated.
type Authenticator func(ctx context.Context, h http.Header) (subject string, err error)

// API serves toolfleet.v1.ConnectionService for the authenticated caller's
// own connections. Mount [API.Handler] at [API.Pattern] and register
// [API.RegisterGRPC] on the gateway's gRPC server; mount [Service.Handler]
// at "/connections/" for the browser flow.
type API struct {
	svc  *Service
	auth Authenticator
}

// NewAPI returns the ConnectionService of svc, authenticating with auth.
func NewAPI(svc *Service, auth Authenticator) *API { return &API{svc: svc, auth: auth} }

var _ toolfleetv1connect.ConnectionServiceHandler = (*API)(nil)

// Pattern is the path prefix of the service.
func (a *API) Pattern() string { return "/" + toolfleetv1connect.ConnectionServiceName + "/" }

// Handler serves the service over Connect, gRPC-Web and gRPC (net/http).
func (a *API) Handler(opts ...connect.HandlerOption) http.Handler {
	_, h := toolfleetv1connect.NewConnectionServiceHandler(a, opts...)
	return h
}

// RegisterGRPC registers the service on a grpc-go server.
func (a *API) RegisterGRPC(r grpc.ServiceRegistrar) {
	toolfleetv1.RegisterConnectionServiceServer(r, grpcAPI{a: a})
}

func (a *API) subject(ctx context.Context, h http.Header) (string, error) {
	sub, err := a.auth(ctx, h)
	if err != nil {
		return "", connect.NewError(connect.CodeUnauthenticated, err)
	}
	return sub, nil
}

// ListConnections lists the caller's connections and the configured providers.
func (a *API) ListConnections(ctx context.Context, req *connect.Request[toolfleetv1.ListConnectionsRequest]) (*connect.Response[toolfleetv1.ListConnectionsResponse], error) {
	sub, err := a.subject(ctx, req.Header())
	if err != nil {
		return nil, err
	}
	list, err := a.svc.List(ctx, sub)
	if err != nil {
		return nil, codeOf(err)
	}
	out := &toolfleetv1.ListConnectionsResponse{Providers: a.svc.Providers()}
	for _, c := range list {
		pc := &toolfleetv1.Connection{Id: c.ID, Provider: c.Provider, Scopes: c.Scopes, Refreshable: c.Refreshable, Unreadable: c.ID == ""}
		if !c.Created.IsZero() {
			pc.Created = timestamppb.New(c.Created)
		}
		if !c.Expires.IsZero() {
			pc.Expires = timestamppb.New(c.Expires)
		}
		if !c.Refreshed.IsZero() {
			pc.Refreshed = timestamppb.New(c.Refreshed)
		}
		out.Connections = append(out.Connections, pc)
	}
	return connect.NewResponse(out), nil
}

// StartConnection begins connecting the caller to a provider.
func (a *API) StartConnection(ctx context.Context, req *connect.Request[toolfleetv1.StartConnectionRequest]) (*connect.Response[toolfleetv1.StartConnectionResponse], error) {
	sub, err := a.subject(ctx, req.Header())
	if err != nil {
		return nil, err
	}
	if len(req.Msg.GetScopes()) > 32 {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("at most 32 scopes"))
	}
	u, err := a.svc.Start(ctx, sub, req.Msg.GetProvider(), req.Msg.GetScopes())
	if err != nil {
		return nil, codeOf(err)
	}
	return connect.NewResponse(&toolfleetv1.StartConnectionResponse{AuthorizationUrl: u}), nil
}

// RevokeConnection deletes the caller's connection to a provider.
func (a *API) RevokeConnection(ctx context.Context, req *connect.Request[toolfleetv1.RevokeConnectionRequest]) (*connect.Response[toolfleetv1.RevokeConnectionResponse], error) {
	sub, err := a.subject(ctx, req.Header())
	if err != nil {
		return nil, err
	}
	found, err := a.svc.Revoke(ctx, sub, req.Msg.GetProvider())
	out := &toolfleetv1.RevokeConnectionResponse{Revoked: found}
	if err != nil {
		if !found {
			return nil, codeOf(err)
		}
		out.ProviderWarning = err.Error() // names the provider and the status, never a token
	}
	return connect.NewResponse(out), nil
}

// codeOf maps the package's errors to Connect codes, with messages in the
// caller's terms.
func codeOf(err error) error {
	switch {
	case errors.Is(err, ErrUnknownProvider):
		return connect.NewError(connect.CodeNotFound, err)
	case errors.Is(err, ErrTooMany):
		return connect.NewError(connect.CodeResourceExhausted, err)
	case errors.Is(err, context.Canceled):
		return connect.NewError(connect.CodeCanceled, err)
	case errors.Is(err, context.DeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, err)
	}
	return connect.NewError(connect.CodeUnavailable, errors.New("the connections store is not answering; try again"))
}

// grpcAPI adapts API to grpc-go.
type grpcAPI struct {
	toolfleetv1.UnimplementedConnectionServiceServer
	a *API
}

func (g grpcAPI) ListConnections(ctx context.Context, r *toolfleetv1.ListConnectionsRequest) (*toolfleetv1.ListConnectionsResponse, error) {
	return grpcadapt.Unary(ctx, g.a, r, (*API).ListConnections)
}

func (g grpcAPI) StartConnection(ctx context.Context, r *toolfleetv1.StartConnectionRequest) (*toolfleetv1.StartConnectionResponse, error) {
	return grpcadapt.Unary(ctx, g.a, r, (*API).StartConnection)
}

func (g grpcAPI) RevokeConnection(ctx context.Context, r *toolfleetv1.RevokeConnectionRequest) (*toolfleetv1.RevokeConnectionResponse, error) {
	return grpcadapt.Unary(ctx, g.a, r, (*API).RevokeConnection)
}
