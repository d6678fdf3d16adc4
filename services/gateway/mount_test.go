package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	rpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/gen/toolfleet/v1/toolfleetv1connect"
	"github.com/toolfleet/toolfleet/services/gateway"
	"github.com/toolfleet/toolfleet/services/gateway/gatewaytest"
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

func TestMount(t *testing.T) {
	t.Parallel()
	var g *gateway.Gateway
	path, h := toolfleetv1connect.NewAgentServiceHandler(echoRuns{g: &g})
	g, err := gateway.New(t.Context(), gateway.Config{Listen: "127.0.0.1:0", Auth: gateway.AuthConfig{Disabled: true},
		Mounts: []gateway.Mount{{Pattern: path, Handler: h}}})
	if err != nil {
		t.Fatal(err)
	}
	cc := runMounted(t, g)
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

// bridgeRuns answers the AgentService in ways a gRPC caller must see exactly
// as the handler meant them: a coded error with a detail and trailers, the
// deadline, custom headers, a stream that ends in an error.
type bridgeRuns struct {
	toolfleetv1connect.UnimplementedAgentServiceHandler
}

func (bridgeRuns) GetRun(ctx context.Context, r *connect.Request[toolfleetv1.GetRunRequest]) (*connect.Response[toolfleetv1.GetRunResponse], error) {
	switch r.Msg.GetRunId() {
	case "missing":
		ce := connect.NewError(connect.CodeNotFound, errors.New("no run «missing» here: 100%"))
		if d, err := connect.NewErrorDetail(&toolfleetv1.GetRunRequest{RunId: "detail"}); err == nil {
			ce.AddDetail(d)
		}
		ce.Meta().Set("x-why", "gone")
		return nil, ce
	case "deadline":
		dl, ok := ctx.Deadline()
		resp := connect.NewResponse(&toolfleetv1.GetRunResponse{RunId: fmt.Sprint(ok && time.Until(dl) > 0 && time.Until(dl) <= time.Minute)})
		return resp, nil
	}
	resp := connect.NewResponse(&toolfleetv1.GetRunResponse{RunId: r.Msg.GetRunId(), FailureMessage: r.Header().Get("X-Caller-Note")})
	resp.Header().Set("x-served-by", "mount")
	resp.Trailer().Set("x-after", "done")
	return resp, nil
}

func (bridgeRuns) WatchRun(_ context.Context, r *connect.Request[toolfleetv1.WatchRunRequest], st *connect.ServerStream[toolfleetv1.WatchRunResponse]) error {
	for i := range 3 {
		if err := st.Send(&toolfleetv1.WatchRunResponse{Item: &toolfleetv1.WatchRunResponse_Event{Event: &toolfleetv1.RunEvent{Seq: uint64(i + 1), Kind: r.Msg.GetRunId()}}}); err != nil {
			return err
		}
	}
	return connect.NewError(connect.CodeResourceExhausted, errors.New("enough"))
}

// TestMountOverGRPC: a mounted Connect handler serves gRPC callers on the
// connections grpc-go holds — codes, messages, details, metadata, deadlines,
// streams, reflection — and anything else stays Unimplemented.
func TestMountOverGRPC(t *testing.T) {
	t.Parallel()
	path, h := toolfleetv1connect.NewAgentServiceHandler(bridgeRuns{})
	g, err := gateway.New(t.Context(), gateway.Config{Listen: "127.0.0.1:0", Auth: gateway.AuthConfig{Disabled: true},
		Mounts: []gateway.Mount{{Pattern: path, Handler: h}, {Pattern: "/pages/", Handler: http.NotFoundHandler()},
			// A service not there yet answers in the caller's protocol (as apibase.Late does).
			{Pattern: "/" + toolfleetv1connect.ProgramServiceName + "/", Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_ = connect.NewErrorWriter().Write(w, r, connect.NewError(connect.CodeUnavailable, errors.New("the orchestrator is starting")))
			})}}})
	if err != nil {
		t.Fatal(err)
	}
	cc := runMounted(t, g)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	// The connection's first call is the gateway's own (grpc-go keeps it).
	if _, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	runs := toolfleetv1.NewAgentServiceClient(cc)

	var header, trailer metadata.MD
	got, err := runs.GetRun(metadata.AppendToOutgoingContext(ctx, "x-caller-note", "hello"),
		&toolfleetv1.GetRunRequest{RunId: "r1"}, grpc.Header(&header), grpc.Trailer(&trailer))
	if err != nil || got.GetRunId() != "r1" || got.GetFailureMessage() != "hello" {
		t.Fatalf("GetRun = %v, %v; want r1 with the caller's metadata", got, err)
	}
	if header.Get("x-served-by")[0] != "mount" || len(trailer.Get("x-after")) != 1 {
		t.Errorf("header %v trailer %v, want the handler's x-served-by and x-after", header, trailer)
	}

	_, err = runs.GetRun(ctx, &toolfleetv1.GetRunRequest{RunId: "missing"}, grpc.Trailer(&trailer))
	st := status.Convert(err)
	if st.Code() != codes.NotFound || st.Message() != "no run «missing» here: 100%" {
		t.Errorf("GetRun(missing) = %v, want NotFound with the handler's message", err)
	}
	if d := st.Details(); len(d) != 1 || d[0].(*toolfleetv1.GetRunRequest).GetRunId() != "detail" {
		t.Errorf("details %v, want the handler's one", d)
	}
	if v := trailer.Get("x-why"); len(v) != 1 || v[0] != "gone" {
		t.Errorf("error trailer %v, want x-why: gone", trailer)
	}

	dctx, dcancel := context.WithTimeout(ctx, 30*time.Second)
	defer dcancel()
	if got, err := runs.GetRun(dctx, &toolfleetv1.GetRunRequest{RunId: "deadline"}); err != nil || got.GetRunId() != "true" {
		t.Errorf("the handler saw the caller's deadline: %v %v, want true", got, err)
	}

	ws, err := runs.WatchRun(ctx, &toolfleetv1.WatchRunRequest{RunId: "tick"})
	if err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	for {
		m, err := ws.Recv()
		if err != nil {
			if status.Code(err) != codes.ResourceExhausted {
				t.Errorf("stream ended with %v, want ResourceExhausted", err)
			}
			break
		}
		seqs = append(seqs, m.GetEvent().GetSeq())
	}
	if fmt.Sprint(seqs) != "[1 2 3]" {
		t.Errorf("streamed %v, want [1 2 3]", seqs)
	}

	if _, err := runs.CancelRun(ctx, &toolfleetv1.CancelRunRequest{RunId: "r1"}); status.Code(err) != codes.Unimplemented {
		t.Errorf("an unimplemented method = %v, want Unimplemented", err)
	}
	if err := cc.Invoke(ctx, "/pages.Nothing/Do", &toolfleetv1.GetRunRequest{}, &toolfleetv1.GetRunResponse{}); status.Code(err) != codes.Unimplemented {
		t.Errorf("a non-service mount over gRPC = %v, want Unimplemented", err)
	}

	_, err = toolfleetv1.NewProgramServiceClient(cc).GetProgram(ctx, &toolfleetv1.GetProgramRequest{ProgramId: "p"})
	if st := status.Convert(err); st.Code() != codes.Unavailable || st.Message() != "the orchestrator is starting" {
		t.Errorf("a mount answering with connect's ErrorWriter = %v, want Unavailable with its message", err)
	}

	// Reflection lists the mounted service next to the gateway's own.
	rs, err := rpb.NewServerReflectionClient(cc).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.Send(&rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := rs.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	if !slices.Contains(names, "toolfleet.v1.AgentService") || !slices.Contains(names, "toolfleet.v1.ToolGatewayService") || slices.Contains(names, "pages") {
		t.Errorf("reflection lists %v, want the gateway's and the mounted service", names)
	}
}

// runMounted runs g until the test ends and returns a gRPC connection to it.
func runMounted(t *testing.T, g *gateway.Gateway) *grpc.ClientConn {
	t.Helper()
	gatewaytest.Run(t, g)
	cc, err := grpc.NewClient(g.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}
