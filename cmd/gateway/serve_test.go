package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/reflection"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	calculatorv1 "github.com/toolfleet/toolfleet/gen/tools/calculator/v1"
	"github.com/toolfleet/toolfleet/internal/natsx/natstest"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/sdk/tool/tooltest"
	"github.com/toolfleet/toolfleet/services/gateway"
	"github.com/toolfleet/toolfleet/workers/calculator/calculator"
)

// echoService is a plain third-party gRPC service: grpc-go's interop TestService,
// knowing nothing of toolfleet.
type echoService struct {
	testgrpc.UnimplementedTestServiceServer
}

func (echoService) UnaryCall(_ context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	return &testgrpc.SimpleResponse{Payload: req.GetPayload(), Username: "echo"}, nil
}

// startPlainGRPC serves echoService with server reflection on a loopback port.
func startPlainGRPC(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(s, echoService{})
	reflection.Register(s)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

// startServe runs serve (the binary minus flag parsing) until the test ends and
// returns the gateway once it listens; the cleanup checks that it stopped cleanly.
func startServe(t *testing.T, cfg Config) *gateway.Gateway {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	started := make(chan *gateway.Gateway, 1)
	done := make(chan error, 1)
	go func() { done <- serve(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), started) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve after stop: %v", err)
		}
	})
	select {
	case g := <-started:
		return g
	case err := <-done:
		t.Fatalf("serve: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the gateway did not start within 30s")
	}
	return nil
}

func baseConfig() Config {
	c, err := parse([]string{"--auth-disabled", "--listen", "127.0.0.1:0", "--workers", "127.0.0.1:1", "--log-level", "error"})
	if err != nil {
		panic(err)
	}
	c.Workers = nil
	return c
}

func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// waitHealth waits (bounded) until service reports want.
func waitHealth(t *testing.T, cc *grpc.ClientConn, service string, want healthpb.HealthCheckResponse_ServingStatus) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	stream, err := healthpb.NewHealthClient(cc).Watch(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		t.Fatal(err)
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("health of %q never became %s: %v", service, want, err)
		}
		if resp.GetStatus() == want {
			return
		}
	}
}

// TestStaticThirdPartyService: the gateway in front of a plain gRPC service with
// reflection, no NATS at all — the setup docs/operations.md shows.
func TestStaticThirdPartyService(t *testing.T) {
	t.Parallel()
	cfg := baseConfig()
	cfg.Workers = []string{startPlainGRPC(t)}
	g := startServe(t, cfg)
	cc := dial(t, g.Addr())
	waitHealth(t, cc, "", healthpb.HealthCheckResponse_SERVING) // static only: ready at once
	client := toolfleetv1.NewToolGatewayServiceClient(cc)

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	input, err := structpb.NewStruct(map[string]any{"payload": map[string]any{"body": "aGk="}})
	if err != nil {
		t.Fatal(err)
	}
	var resp *toolfleetv1.CallToolResponse
	for { // the static worker's contract loads in the background
		resp, err = client.CallTool(ctx, &toolfleetv1.CallToolRequest{ToolId: "Test.UnaryCall", Input: input})
		if err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("CallTool Test.UnaryCall: %v", err)
	}
	got := resp.GetValue().GetStructValue().AsMap()
	if !resp.GetSuccess() || got["username"] != "echo" || got["payload"].(map[string]any)["body"] != "aGk=" {
		t.Fatalf("response %v", resp)
	}
}

// TestReadyAfterNATSResources: with NATS the gateway is live at once but ready
// only when its event stream and idempotency bucket exist.
func TestReadyAfterNATSResources(t *testing.T) {
	t.Parallel()
	t.Run("NATS away: live, not ready", func(t *testing.T) {
		t.Parallel()
		lis, err := net.Listen("tcp", "127.0.0.1:0") // a port where no NATS answers
		if err != nil {
			t.Fatal(err)
		}
		addr := lis.Addr().String()
		_ = lis.Close()
		cfg := baseConfig()
		cfg.NATSURL = "nats://" + addr
		g := startServe(t, cfg)
		cc := dial(t, g.Addr())
		waitHealth(t, cc, toolfleetv1.ToolGatewayService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
		resp, err := healthpb.NewHealthClient(cc).Check(t.Context(), &healthpb.HealthCheckRequest{})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Fatalf("readiness without NATS: %v %v, want NOT_SERVING", resp, err)
		}
	})
	t.Run("NATS up: ready once stream and bucket exist", func(t *testing.T) {
		t.Parallel()
		ns := natstest.Start(t)
		tooltest.Start(t, tool.Config{Name: "calculator", NATSURL: ns.URL()}, func(w *tool.Worker) {
			calculatorv1.RegisterCalculatorServiceServer(w, calculator.New())
		})
		cfg := baseConfig()
		cfg.NATSURL = ns.URL()
		g := startServe(t, cfg)
		waitHealth(t, dial(t, g.Addr()), "", healthpb.HealthCheckResponse_SERVING)

		nc, err := nats.Connect(ns.URL())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.Stream(t.Context(), gateway.DefaultEventStream); err != nil {
			t.Errorf("ready, but the event stream: %v", err)
		}
		if _, err := js.KeyValue(t.Context(), gateway.DefaultIdempotencyBucket); err != nil {
			t.Errorf("ready, but the idempotency bucket: %v", err)
		}
	})
}

// TestConsoleMounted: with --console the gateway binary serves the console
// at /console/ on its port, and the console reaches the APIs at the
// gateway's own address (here: runs are not configured, which its page says).
func TestConsoleMounted(t *testing.T) {
	t.Parallel()
	cfg := baseConfig()
	cfg.Console.Enabled = true
	g := startServe(t, cfg)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	get := func(path string) (int, string, http.Header) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+g.Addr()+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return resp.StatusCode, string(b), resp.Header
	}
	// Until the gateway listens the console has no API to call; then it
	// reaches this gateway, which says runs are not configured.
	for {
		code, body, h := get("/console/runs")
		if csp := h.Get("Content-Security-Policy"); !strings.Contains(csp, "frame-ancestors 'none'") {
			t.Fatalf("GET /console/runs: %d, CSP %q", code, csp)
		}
		if strings.Contains(body, "does not serve agent runs") {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the console never reached the gateway's AgentService: %d %.500s", code, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Without --console there is no console.
	g2 := startServe(t, baseConfig())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+g2.Addr()+"/console/", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		t.Errorf("GET /console/ without --console: %d", resp.StatusCode)
	}
}

func TestSelfURL(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"[::]:8080":     "http://127.0.0.1:8080",
		"0.0.0.0:8080":  "http://127.0.0.1:8080",
		"127.0.0.1:9":   "http://127.0.0.1:9",
		"10.1.2.3:8080": "http://10.1.2.3:8080",
		"[::1]:8080":    "http://[::1]:8080",
	} {
		if got := selfURL(in); got != want {
			t.Errorf("selfURL(%q) = %q, want %q", in, got, want)
		}
	}
}
