package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"

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

	refused atomic.Bool // a dial to the gateway was refused: nothing listens there
}

// noGatewayError is a command's failure when nothing listens at the gateway
// address: it says how to start one.
type noGatewayError struct{ addr string }

func (e *noGatewayError) Error() string {
	return fmt.Sprintf("no gateway at %s: start one with `toolfleet dev` (or set --gateway)", e.addr)
}

// dial connects to the gateway, noting a refused connection.
func (g *gatewayFlags) dial(ctx context.Context, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if errors.Is(err, syscall.ECONNREFUSED) {
		g.refused.Store(true)
	}
	return c, err
}

// explain is err, or a noGatewayError when the command failed because the
// gateway refused the connection (a dial error deep in gRPC's or Connect's
// words otherwise).
func (g *gatewayFlags) explain(err error) error {
	if err == nil || !g.refused.Load() {
		return err
	}
	var ee *exitError
	var down *noGatewayError
	if errors.As(err, &ee) || errors.As(err, &down) {
		return err // reported already, or says it already
	}
	return &noGatewayError{addr: g.Gateway}
}

// explainErrors makes every command under cmd that talks to the gateway
// through gf fail with explain's error.
func explainErrors(cmd *cobra.Command, gf *gatewayFlags) {
	for _, c := range cmd.Commands() {
		explainErrors(c, gf)
		if run := c.RunE; run != nil {
			c.RunE = func(cmd *cobra.Command, args []string) error { return gf.explain(run(cmd, args)) }
		}
	}
}

// httpClient is the HTTP client of Connect calls: it dials with dial.
func (g *gatewayFlags) httpClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = func(ctx context.Context, _, addr string) (net.Conn, error) { return g.dial(ctx, addr) }
	return &http.Client{Transport: t}
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
	opts := []client.Option{client.WithTimeout(g.Timeout), client.WithDialOptions(grpc.WithContextDialer(g.dial))}
	if g.Token != "" {
		opts = append(opts, client.WithToken(g.Token))
	}
	if g.Connect {
		opts = append(opts, client.WithConnect(g.httpClient()))
	}
	return client.New(g.Gateway, opts...)
}

// runs speaks Connect (HTTP) to the gateway's AgentService.
func (g *gatewayFlags) runs() (toolfleetv1connect.AgentServiceClient, error) {
	base, opts, err := g.connectBase()
	if err != nil {
		return nil, err
	}
	return toolfleetv1connect.NewAgentServiceClient(g.httpClient(), base, opts...), nil
}

// programs speaks Connect (HTTP) to the gateway's ProgramService.
func (g *gatewayFlags) programs() (toolfleetv1connect.ProgramServiceClient, error) {
	base, opts, err := g.connectBase()
	if err != nil {
		return nil, err
	}
	return toolfleetv1connect.NewProgramServiceClient(g.httpClient(), base, opts...), nil
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
