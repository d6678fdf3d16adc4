package gateway_test

import (
	"context"
	"net/http"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/gen/toolfleet/v1/toolfleetv1connect"
	"github.com/toolfleet/toolfleet/services/gateway"
)

// echoRuns answers GetRun with the caller's subject as the failure message,
// so a test sees that the mount (not grpc-go) served it and how it authenticated.
type echoRuns struct {
	toolfleetv1connect.UnimplementedAgentServiceHandler
	g **gateway.Gateway
}

func (e echoRuns) GetRun(ctx context.Context, r *connect.Request[toolfleetv1.GetRunRequest]) (*connect.Response[toolfleetv1.GetRunResponse], error) {
	p, err := (*e.g).Authenticate(ctx, r.Header().Get("Authorization"))
	if err != nil {
		return nil, connect.NewError(connect.CodeUnauthenticated, err)
	}
	who := p.Subject
	if p.Anonymous {
		who = "anonymous"
	}
	return connect.NewResponse(&toolfleetv1.GetRunResponse{RunId: r.Msg.GetRunId(), FailureMessage: who}), nil
}

// echoGRPC is echoRuns for grpc-go.
type echoGRPC struct {
	toolfleetv1.UnimplementedAgentServiceServer
	g **gateway.Gateway
}

func (e echoGRPC) GetRun(ctx context.Context, r *toolfleetv1.GetRunRequest) (*toolfleetv1.GetRunResponse, error) {
	auth := ""
	if v := metadata.ValueFromIncomingContext(ctx, "authorization"); len(v) > 0 {
		auth = v[0]
	}
	req := connect.NewRequest(r)
	req.Header().Set("Authorization", auth)
	resp, err := echoRuns{g: e.g}.GetRun(ctx, req)
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

func TestMount(t *testing.T) {
	t.Parallel()
	var g *gateway.Gateway
	path, h := toolfleetv1connect.NewAgentServiceHandler(echoRuns{g: &g})
	g, err := gateway.New(t.Context(), gateway.Config{Listen: "127.0.0.1:0", Auth: gateway.AuthConfig{Disabled: true},
		Mounts: []gateway.Mount{{Pattern: path, Handler: h, RegisterGRPC: func(r grpc.ServiceRegistrar) {
			toolfleetv1.RegisterAgentServiceServer(r, echoGRPC{g: &g})
		}}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-g.Ready():
	case err := <-done:
		t.Fatal(err)
	}

	cc, err := grpc.NewClient(g.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	clients := map[string]func() (*toolfleetv1.GetRunResponse, error){
		"grpc": func() (*toolfleetv1.GetRunResponse, error) {
			return toolfleetv1.NewAgentServiceClient(cc).GetRun(t.Context(), &toolfleetv1.GetRunRequest{RunId: "r1"})
		},
		"connect": func() (*toolfleetv1.GetRunResponse, error) {
			resp, err := toolfleetv1connect.NewAgentServiceClient(http.DefaultClient, "http://"+g.Addr()).
				GetRun(t.Context(), connect.NewRequest(&toolfleetv1.GetRunRequest{RunId: "r1"}))
			if err != nil {
				return nil, err
			}
			return resp.Msg, nil
		},
	}
	for name, call := range clients {
		resp, err := call()
		if err != nil || resp.GetRunId() != "r1" || resp.GetFailureMessage() != "anonymous" {
			t.Errorf("%s: %v %v, want the mounted handler's echo", name, resp, err)
		}
	}
	// The gateway's own service still answers next to the mount.
	if _, err := toolfleetv1.NewToolGatewayServiceClient(cc).ListTools(t.Context(), &toolfleetv1.ListToolsRequest{}); err != nil {
		t.Fatalf("ListTools next to a mount: %v", err)
	}
}
