package gateway

import (
	"context"
	"errors"
	"net/http"
	"strings"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// Mount is a service served at the gateway's address but implemented
// elsewhere (e.g. AgentService by the orchestrator), wired in cmd/. Pattern is
// a path prefix as connect-go handlers give it ("/toolfleet.v1.AgentService/")
// or a page prefix ("/console/"); every request under it goes to Handler. When
// Pattern names a gRPC service in the protobuf registry, the service is listed
// by server reflection and its gRPC calls reach Handler too, also on
// connections the gateway's grpc-go server holds (mountgrpc.go): a connect-go
// handler serves Connect, gRPC-Web, gRPC and HTTP JSON alike. Handlers
// authenticate with [Gateway.Authenticate].
type Mount struct {
	Pattern string
	Handler http.Handler
}

// mounted reports whether path belongs to a mount.
func (g *Gateway) mounted(path string) bool {
	for _, m := range g.cfg.Mounts {
		if strings.HasPrefix(path, m.Pattern) {
			return true
		}
	}
	return false
}

// Authenticate verifies an Authorization header value the way the gateway's
// own services do, for mounted services.
func (g *Gateway) Authenticate(ctx context.Context, authorization string) (*Principal, error) {
	p, ce := g.auth.Authenticate(ctx, authorization)
	if ce != nil {
		return nil, errors.New(ce.Message)
	}
	return p, nil
}

// SetMountHealth sets the grpc.health.v1 status of a mounted service (e.g.
// "toolfleet.v1.AgentService"), so that a probe asking for it sees what its
// calls would: serving, or not (its backend is away or not configured). The
// overall status ("") and the gateway's own service stay the gateway's: they
// cannot be set here.
func (g *Gateway) SetMountHealth(service string, serving bool) error {
	if service == "" || service == toolfleetv1.ToolGatewayService_ServiceDesc.ServiceName {
		return errors.New("gateway: the overall and the tool gateway's health are the gateway's own")
	}
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if serving {
		st = healthpb.HealthCheckResponse_SERVING
	}
	g.health.SetServingStatus(service, st)
	return nil
}
