package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"sigs.k8s.io/yaml"

	"github.com/toolfleet/toolfleet/internal/devstack/devstacktest"
	"github.com/toolfleet/toolfleet/internal/natsx"
	"github.com/toolfleet/toolfleet/orchestrator/runner"
	"github.com/toolfleet/toolfleet/orchestrator/trigger"
	"github.com/toolfleet/toolfleet/sdk/natsconn"
)

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return port
}

// TestStartsBeforeNATS: the orchestrator's pod starts before NATS answers (in
// Kubernetes, before cluster DNS resolves the nats Service). It must wait and
// become SERVING once NATS is up, not exit (which made the kubelet restart it).
func TestStartsBeforeNATS(t *testing.T) {
	t.Parallel()
	stack := devstacktest.Start(t) // its Temporal; NATS is a late one below
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	port := freePort(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := runner.Config{TemporalAddress: stack.Temporal.Address(), Namespace: stack.Namespace(),
		NATSURL: "nats://127.0.0.1:" + strconv.Itoa(port), GatewayAddress: "127.0.0.1:1", MemoryStorage: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- serve(runCtx, cfg, 2*time.Minute, lis) }()

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	health := healthpb.NewHealthClient(conn)
	// Two seconds without NATS: still starting, not exited.
	time.Sleep(2 * time.Second)
	select {
	case err := <-done:
		t.Fatalf("serve returned while NATS was away: %v", err)
	default:
	}
	resp, err := health.Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("before NATS: %v, %v; want NOT_SERVING", resp, err)
	}

	srv, err := natsx.StartEmbedded(ctx, natsx.EmbeddedConfig{Port: port, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	watch, err := health.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for {
		resp, err := watch.Recv()
		if err != nil {
			t.Fatalf("health watch (NATS up): %v", err)
		}
		if resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			break
		}
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("serve: %v", err)
	}
}

// A Temporal frontend that does not answer yet is a reason to wait; what the
// Temporal client really returns for it is classified so.
func TestTemporalUnreachableIsTemporary(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err := client.DialContext(ctx, client.Options{HostPort: "127.0.0.1:" + strconv.Itoa(freePort(t)),
		Logger: quietTemporal{}})
	if err == nil {
		t.Fatal("dialled a closed port")
	}
	if !temporaryStart(err) {
		t.Fatalf("temporaryStart(%v) = false, want true", err)
	}
	if temporaryStart(errors.New("--temporal-tls-ca-file: no such file")) {
		t.Fatal("a configuration error was classified as temporary")
	}
	if temporaryStart(natsconn.ErrInvalid) {
		t.Fatal("invalid NATS options were classified as temporary")
	}
}

type quietTemporal struct{}

func (quietTemporal) Debug(string, ...any) {}
func (quietTemporal) Info(string, ...any)  {}
func (quietTemporal) Warn(string, ...any)  {}
func (quietTemporal) Error(string, ...any) {}

// The kind overlays' trigger file (a ConfigMap mounted into the orchestrator)
// loads: a mistake in it would keep every orchestrator pod from starting.
func TestKindTriggersLoad(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../k8s/components/kind/triggers.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cm struct {
		Data map[string]string `json:"data"`
	}
	if err := yaml.Unmarshal(b, &cm); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "triggers.yaml")
	if err := os.WriteFile(path, []byte(cm.Data["triggers.yaml"]), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := trigger.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Triggers) != 2 || cfg.Triggers[0].Agent == nil || cfg.Triggers[1].Program == nil {
		t.Fatalf("kind triggers = %+v, want an agent trigger and a program trigger", cfg.Triggers)
	}
}
