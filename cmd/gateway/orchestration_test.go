package main

import (
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/gen/toolfleet/v1/toolfleetv1connect"
	"github.com/toolfleet/toolfleet/sdk/llm"
)

// TestRunsWithoutTemporal: a gateway without --temporal-address still serves
// tools, and every surface of the run and program APIs answers
// FAILED_PRECONDITION naming the flag (not 404), with their health NOT_SERVING
// while the gateway's own is SERVING.
func TestRunsWithoutTemporal(t *testing.T) {
	t.Parallel()
	g := startServe(t, baseConfig())
	cc := dial(t, g.Addr())
	waitHealth(t, cc, "", healthpb.HealthCheckResponse_SERVING)
	waitHealth(t, cc, "toolfleet.v1.AgentService", healthpb.HealthCheckResponse_NOT_SERVING)
	waitHealth(t, cc, "toolfleet.v1.ProgramService", healthpb.HealthCheckResponse_NOT_SERVING)

	// gRPC (grpc-go), unary and streaming.
	_, err := toolfleetv1.NewAgentServiceClient(cc).StartRun(t.Context(), &toolfleetv1.StartRunRequest{Model: "scripted:demo"})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "--temporal-address") {
		t.Errorf("gRPC StartRun = %v, want FAILED_PRECONDITION naming --temporal-address", err)
	}
	ws, err := toolfleetv1.NewProgramServiceClient(cc).WatchProgram(t.Context(), &toolfleetv1.WatchProgramRequest{ProgramId: "p"})
	if err == nil {
		_, err = ws.Recv()
	}
	if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("gRPC WatchProgram = %v, want FAILED_PRECONDITION", err)
	}
	// Connect (HTTP), unary and streaming.
	base := "http://" + g.Addr()
	_, err = toolfleetv1connect.NewProgramServiceClient(http.DefaultClient, base).GetProgram(t.Context(),
		connect.NewRequest(&toolfleetv1.GetProgramRequest{ProgramId: "p"}))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "--temporal-address") {
		t.Errorf("Connect GetProgram = %v, want failed_precondition naming --temporal-address", err)
	}
	st, err := toolfleetv1connect.NewAgentServiceClient(http.DefaultClient, base).WatchRun(t.Context(),
		connect.NewRequest(&toolfleetv1.WatchRunRequest{RunId: "r"}))
	if err == nil {
		for st.Receive() {
		}
		err = st.Err()
	}
	if connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("Connect WatchRun = %v, want failed_precondition", err)
	}
}

func TestOrchestrationFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"temporal needs NATS", []string{"--temporal-address", "temporal:7233", "--workers", "w:1"}, "--temporal-address needs --nats-url"},
		{"TLS without an address", []string{"--temporal-tls-server-name", "t", "--workers", "w:1"}, "without --temporal-address"},
		{"model endpoint without temporal", []string{"--model-endpoint", "none=http://127.0.0.1:*", "--workers", "w:1"}, "--model-endpoint is set without --temporal-address"},
		{"bad model endpoint", []string{"--temporal-address", "t:7233", "--nats-url", "nats://n:4222", "--model-endpoint", "env:K=ftp://x"}, "--model-endpoint"},
		{"empty task queue", []string{"--temporal-address", "t:7233", "--nats-url", "nats://n:4222", "--task-queue", ""}, "--task-queue"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := parse(append([]string{"--auth-disabled"}, tt.args...))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("parse = %v, want an error with %q", err, tt.want)
			}
		})
	}
	cfg, err := parse([]string{"--auth-disabled", "--nats-url", "nats://n:4222", "--temporal-address", "t:7233"})
	if err != nil {
		t.Fatal(err)
	}
	if o := cfg.Orchestration; o.Namespace != "default" || o.TaskQueue != "toolfleet-agent" {
		t.Fatalf("defaults = %+v, want the orchestrator's namespace and task queue", o)
	}
	// The bindings are parsed at start and used by StartRun's check.
	cfg, err = parse([]string{"--auth-disabled", "--nats-url", "nats://n:4222", "--temporal-address", "t:7233",
		"--model-endpoint", "env:TOOLFLEET_MODEL_KEY_TEAM=https://vllm.internal:8000/v1"})
	if err != nil {
		t.Fatal(err)
	}
	bound := llm.Spec{Provider: "openai-compatible", Name: "m", BaseURL: "https://vllm.internal:8000/v1", KeyRef: "env:TOOLFLEET_MODEL_KEY_TEAM"}
	if err := cfg.Orchestration.endpoints.Check(bound); err != nil {
		t.Errorf("bound endpoint refused: %v", err)
	}
	bound.BaseURL = "https://elsewhere.example/v1"
	if err := cfg.Orchestration.endpoints.Check(bound); err == nil {
		t.Error("a key sent to an unbound URL was allowed")
	}
}
