package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/toolfleet/toolfleet/internal/devstack/devstacktest"
	"github.com/toolfleet/toolfleet/orchestrator/runner"
)

// TestHealthFollowsTheNamespace starts the orchestrator on a namespace that
// does not exist yet: health reports NOT_SERVING until the namespace is
// registered, then SERVING, then NOT_SERVING while it stops.
func TestHealthFollowsTheNamespace(t *testing.T) {
	t.Parallel()
	stack := devstacktest.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	const ns = "orchestrator-health-late"
	cfg := runner.Config{TemporalAddress: stack.Temporal.Address(), Namespace: ns, NATSURL: stack.NATS.URL(),
		GatewayAddress: "127.0.0.1:1", MemoryStorage: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- serve(runCtx, cfg, 2*time.Minute, lis) }()

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	watch, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	recv := func() healthpb.HealthCheckResponse_ServingStatus {
		t.Helper()
		resp, err := watch.Recv()
		if err != nil {
			t.Fatalf("health watch: %v", err)
		}
		return resp.GetStatus()
	}
	if got := recv(); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("before the namespace exists: %v, want NOT_SERVING", got)
	}

	nsc, err := client.NewNamespaceClient(client.Options{HostPort: stack.Temporal.Address()})
	if err != nil {
		t.Fatal(err)
	}
	defer nsc.Close()
	if err := nsc.Register(ctx, &workflowservice.RegisterNamespaceRequest{Namespace: ns,
		WorkflowExecutionRetentionPeriod: durationpb.New(24 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if got := recv(); got != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("after the namespace is registered: %v, want SERVING", got)
	}

	stop()
	if got := recv(); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("while stopping: %v, want NOT_SERVING", got)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("serve did not return after its context ended")
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cert := filepath.Join(dir, "tls.crt")
	if err := os.WriteFile(cert, []byte("not a cert"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"bad listen", []string{"--listen", "8081"}, "--listen"},
		{"client cert without key", []string{"--temporal-tls-cert-file", cert}, "certificate and key go together"},
		{"missing CA file", []string{"--temporal-tls-ca-file", filepath.Join(dir, "nope.pem")}, "no such file"},
		{"two NATS auth methods", []string{"--nats-token", "t", "--nats-user", "u", "--nats-password", "p"}, "natsconn"},
		{"NATS cert without key", []string{"--nats-cert", cert}, "natsconn"},
		{"zero start timeout", []string{"--start-timeout", "0s"}, "--start-timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := parse(tt.args)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("parse(%v) = %v, want an error containing %q", tt.args, err, tt.want)
			}
		})
	}
	cfg, opt, err := parse([]string{"--temporal-tls-ca-file", cert, "--temporal-tls-server-name", "temporal.example", "--nats-token", "t"})
	if err != nil {
		t.Fatalf("valid flags: %v", err)
	}
	if cfg.TemporalTLS.ServerName != "temporal.example" || cfg.NATS.Token != "t" || opt.listen != "127.0.0.1:8081" {
		t.Fatalf("parsed %+v %+v", cfg, opt)
	}
}
