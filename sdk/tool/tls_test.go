package tool_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	calculatorv1 "github.com/toolfleet/toolfleet/gen/tools/calculator/v1"
	"github.com/toolfleet/toolfleet/internal/testcerts"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/sdk/tool/tooltest"
)

// TestTLSConfigErrors: bad TLS settings fail NewWorker, not the first call.
func TestTLSConfigErrors(t *testing.T) {
	t.Parallel()
	ca := testcerts.NewCA(t, "ca")
	cert := ca.Server(t, "worker")
	tests := []struct {
		name string
		tls  tool.TLSConfig
	}{
		{"client CA without a certificate", tool.TLSConfig{ClientCAFile: ca.File}},
		{"certificate without a key", tool.TLSConfig{CertFile: cert.CertFile}},
		{"missing files", tool.TLSConfig{CertFile: "/nonexistent.pem", KeyFile: "/nonexistent-key.pem"}},
		{"client CA not PEM", tool.TLSConfig{CertFile: cert.CertFile, KeyFile: cert.KeyFile, ClientCAFile: cert.KeyFile}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if _, err := tool.NewWorker(tool.Config{TLS: tt.tls}); !errors.Is(err, tool.ErrTLS) {
				t.Fatalf("NewWorker: %v, want ErrTLS", err)
			}
		})
	}
	if _, err := tool.NewWorker(tool.Config{TLS: tool.TLSConfig{CertFile: cert.CertFile, KeyFile: cert.KeyFile, ClientCAFile: ca.File}}); err != nil {
		t.Fatalf("valid mTLS settings: %v", err)
	}
}

// TestHealthPortWithTLS: a TLS worker answers plain-text health checks on its
// health port (for probes) and nothing else there; its main port needs TLS.
func TestHealthPortWithTLS(t *testing.T) {
	t.Parallel()
	ca := testcerts.NewCA(t, "ca")
	cert := ca.Server(t, "worker")
	w, _ := tooltest.Start(t, tool.Config{Name: "calc", HealthListen: "127.0.0.1:0",
		TLS: tool.TLSConfig{CertFile: cert.CertFile, KeyFile: cert.KeyFile}},
		func(w *tool.Worker) {
			calculatorv1.RegisterCalculatorServiceServer(w, calculatorv1.UnimplementedCalculatorServiceServer{})
		})
	plain := func(addr string) *grpc.ClientConn {
		t.Helper()
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cc.Close() })
		return cc
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	health := plain(w.HealthAddr())
	resp, err := healthpb.NewHealthClient(health).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health port: %v %v", resp, err)
	}
	if _, err := calculatorv1.NewCalculatorServiceClient(health).Add(ctx, &calculatorv1.AddRequest{A: 1, B: 2}); status.Code(err) != codes.Unimplemented {
		t.Fatalf("a tool on the health port: %v, want Unimplemented", err)
	}
	if _, err := healthpb.NewHealthClient(plain(w.Addr())).Check(ctx, &healthpb.HealthCheckRequest{}); err == nil {
		t.Fatal("the TLS port answered in plain text")
	}
}
