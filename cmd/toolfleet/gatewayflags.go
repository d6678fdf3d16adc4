package main

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/pflag"

	"github.com/toolfleet/toolfleet/gen/toolfleet/v1/toolfleetv1connect"
	"github.com/toolfleet/toolfleet/sdk/client"
	"github.com/toolfleet/toolfleet/services/gateway"
)

// gatewayFlags are the flags every command that talks to a gateway shares:
// where it is and the token (registerAddr), and for commands that call tools
// the deadline and the protocol (register).
type gatewayFlags struct {
	Gateway string
	Token   string
	Timeout time.Duration
	Connect bool
}

// registerAddr declares --gateway and --token.
func (g *gatewayFlags) registerAddr(fs *pflag.FlagSet) {
	fs.StringVar(&g.Gateway, "gateway", gateway.DefaultListen, gatewayFlagHelp)
	fs.StringVar(&g.Token, "token", "", "bearer token for a gateway with auth on")
}

// register declares every gateway flag.
func (g *gatewayFlags) register(fs *pflag.FlagSet) {
	g.registerAddr(fs)
	fs.DurationVar(&g.Timeout, "timeout", client.DefaultTimeout, "deadline of each request, retries included")
	fs.BoolVar(&g.Connect, "connect", false, "speak the Connect protocol over HTTP instead of gRPC")
}

// client is the tool-calling client (gRPC, or Connect with --connect).
func (g *gatewayFlags) client() (*client.Client, error) {
	if g.Gateway == "" {
		return nil, errors.New("--gateway must not be empty")
	}
	if g.Timeout <= 0 {
		return nil, errors.New("--timeout must be positive")
	}
	opts := []client.Option{client.WithTimeout(g.Timeout)}
	if g.Token != "" {
		opts = append(opts, client.WithToken(g.Token))
	}
	if g.Connect {
		opts = append(opts, client.WithConnect(nil))
	}
	return client.New(g.Gateway, opts...)
}

// runs speaks Connect (HTTP) to the gateway's AgentService.
func (g *gatewayFlags) runs() (toolfleetv1connect.AgentServiceClient, error) {
	base, opts, err := g.connectBase()
	if err != nil {
		return nil, err
	}
	return toolfleetv1connect.NewAgentServiceClient(http.DefaultClient, base, opts...), nil
}

// programs speaks Connect (HTTP) to the gateway's ProgramService.
func (g *gatewayFlags) programs() (toolfleetv1connect.ProgramServiceClient, error) {
	base, opts, err := g.connectBase()
	if err != nil {
		return nil, err
	}
	return toolfleetv1connect.NewProgramServiceClient(http.DefaultClient, base, opts...), nil
}

// connectBase is the gateway's base URL and the options that send the token.
func (g *gatewayFlags) connectBase() (string, []connect.ClientOption, error) {
	if g.Gateway == "" {
		return "", nil, errors.New("--gateway must not be empty")
	}
	base := g.Gateway
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	var opts []connect.ClientOption
	if g.Token != "" {
		opts = append(opts, connect.WithInterceptors(bearer(g.Token)))
	}
	return strings.TrimSuffix(base, "/"), opts, nil
}

// bearer adds the token to every request, unary and streaming.
type bearer string

func (b bearer) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, r connect.AnyRequest) (connect.AnyResponse, error) {
		r.Header().Set("Authorization", "Bearer "+string(b))
		return next(ctx, r)
	}
}

func (b bearer) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, s connect.Spec) connect.StreamingClientConn {
		c := next(ctx, s)
		c.RequestHeader().Set("Authorization", "Bearer "+string(b))
		return c
	}
}

func (b bearer) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}
