package gateway

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"google.golang.org/grpc"
)

// Mount is a service served at the gateway's address but implemented
// elsewhere (e.g. AgentService by the orchestrator), wired in cmd/. Pattern is
// a path prefix as connect-go handlers give it ("/toolfleet.v1.AgentService/");
// its Connect, gRPC-Web and HTTP requests go to Handler. gRPC connections are
// served by the gateway's grpc-go server, on which RegisterGRPC (when set)
// registers the same service. Both authenticate with [Gateway.Authenticate].
type Mount struct {
	Pattern      string
	Handler      http.Handler
	RegisterGRPC func(grpc.ServiceRegistrar)
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
	p, ce := g.auth.authenticate(ctx, authorization)
	if ce != nil {
		return nil, errors.New(ce.Server.GetMessage())
	}
	return p, nil
}
