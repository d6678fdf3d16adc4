package gateway

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/gen/toolfleet/v1/toolfleetv1connect"
	"github.com/toolfleet/toolfleet/internal/syncbuf"
	"github.com/toolfleet/toolfleet/sdk/tool/tooltest"
)

const panicText = "runtime error: secret internals at 0xdeadbeef"

// panicking is a gateway service whose CallTool panics.
type panicking struct {
	toolfleetv1.UnimplementedToolGatewayServiceServer
}

func (panicking) CallTool(context.Context, *toolfleetv1.CallToolRequest) (*toolfleetv1.CallToolResponse, error) {
	panic(panicText)
}

type panickingConnect struct {
	toolfleetv1connect.UnimplementedToolGatewayServiceHandler
}

func (panickingConnect) CallTool(context.Context, *connect.Request[toolfleetv1.CallToolRequest]) (*connect.Response[toolfleetv1.CallToolResponse], error) {
	panic(panicText)
}

// TestPanicsBecomeInternalErrors: a panic in a handler of any surface reaches
// the caller as Internal with an error id and no panic text; the log has the
// panic and the stack under that id; the server keeps serving.
func TestPanicsBecomeInternalErrors(t *testing.T) {
	t.Parallel()
	logs := &syncbuf.Buffer{}
	g, err := New(t.Context(), Config{Listen: "127.0.0.1:0", Auth: AuthConfig{Disabled: true},
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}

	// gRPC, with the gateway's interceptors.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(grpc.ChainUnaryInterceptor(g.recoverUnary))
	toolfleetv1.RegisterToolGatewayServiceServer(gs, panicking{})
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	client := toolfleetv1.NewToolGatewayServiceClient(tooltest.Dial(t, ln.Addr().String()))

	// Connect, with the gateway's recover option; plain HTTP with its middleware.
	mux := http.NewServeMux()
	mux.Handle(toolfleetv1connect.NewToolGatewayServiceHandler(panickingConnect{}, g.connectRecover()))
	mux.Handle("/boom", http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic(panicText) }))
	hs := httptest.NewServer(g.recoverHTTP(mux))
	t.Cleanup(hs.Close)
	cc := toolfleetv1connect.NewToolGatewayServiceClient(hs.Client(), hs.URL)

	for round := range 2 { // the second round shows the servers still serve
		var messages []string
		_, err := client.CallTool(t.Context(), &toolfleetv1.CallToolRequest{})
		if status.Code(err) != codes.Internal {
			t.Fatalf("round %d: gRPC: %v, want Internal", round, err)
		}
		messages = append(messages, status.Convert(err).Message())
		_, err = cc.CallTool(t.Context(), connect.NewRequest(&toolfleetv1.CallToolRequest{}))
		if connect.CodeOf(err) != connect.CodeInternal {
			t.Fatalf("round %d: Connect: %v, want Internal", round, err)
		}
		messages = append(messages, err.Error())
		resp, err := hs.Client().Get(hs.URL + "/boom")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusInternalServerError {
			t.Fatalf("round %d: HTTP: status %d, want 500", round, resp.StatusCode)
		}
		messages = append(messages, string(body))
		for _, m := range messages {
			if strings.Contains(m, "secret internals") || !strings.Contains(m, "error id ") {
				t.Errorf("round %d: caller saw %q; want a generic message with an error id", round, m)
				continue
			}
			id := m[strings.Index(m, "error id ")+len("error id "):][:16]
			if !strings.Contains(logs.String(), "error_id="+id) {
				t.Errorf("error id %s is not in the logs", id)
			}
		}
	}
	if l := logs.String(); !strings.Contains(l, "secret internals") || !strings.Contains(l, "recover_internal_test.go") {
		t.Errorf("the logs lack the panic text or its stack:\n%s", l)
	}
}
