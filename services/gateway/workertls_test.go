package gateway_test

import (
	"errors"
	"log/slog"
	"strings"
	"testing"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	calculatorv1 "github.com/toolfleet/toolfleet/gen/tools/calculator/v1"
	"github.com/toolfleet/toolfleet/internal/testcerts"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/sdk/tool/tooltest"
	"github.com/toolfleet/toolfleet/services/gateway"
	"github.com/toolfleet/toolfleet/workers/calculator/calculator"
)

// TestWorkerTLS: the gateway dials workers over TLS and mTLS with certificates
// the test makes. A worker that requires client certificates serves a gateway
// that has one from the CA it trusts, and refuses a gateway without one, with
// one from another CA, or in plain text; a gateway that does not trust the
// worker's CA refuses the worker.
func TestWorkerTLS(t *testing.T) {
	t.Parallel()
	workerCA := testcerts.NewCA(t, "workers")
	gatewayCA := testcerts.NewCA(t, "gateways")
	otherCA := testcerts.NewCA(t, "other")
	workerCert := workerCA.Server(t, "calculator")
	gwCert := gatewayCA.Client(t, "gateway")
	strangerCert := otherCA.Client(t, "stranger")

	start := func(cfg tool.TLSConfig) string {
		w, _ := tooltest.Start(t, tool.Config{Name: "calc", TLS: cfg},
			func(w *tool.Worker) { calculatorv1.RegisterCalculatorServiceServer(w, calculator.New()) })
		return w.Addr()
	}
	mtlsWorker := start(tool.TLSConfig{CertFile: workerCert.CertFile, KeyFile: workerCert.KeyFile, ClientCAFile: gatewayCA.File})
	tlsWorker := start(tool.TLSConfig{CertFile: workerCert.CertFile, KeyFile: workerCert.KeyFile})

	tests := []struct {
		name   string
		worker string
		tls    gateway.WorkerTLSConfig
		ok     bool
	}{
		{"mTLS", mtlsWorker, gateway.WorkerTLSConfig{CAFile: workerCA.File, CertFile: gwCert.CertFile, KeyFile: gwCert.KeyFile}, true},
		{"TLS", tlsWorker, gateway.WorkerTLSConfig{CAFile: workerCA.File}, true},
		{"TLS by name", tlsWorker, gateway.WorkerTLSConfig{CAFile: workerCA.File, ServerName: "localhost"}, true},
		{"mTLS without a client certificate", mtlsWorker, gateway.WorkerTLSConfig{CAFile: workerCA.File}, false},
		{"mTLS with a certificate from another CA", mtlsWorker, gateway.WorkerTLSConfig{CAFile: workerCA.File, CertFile: strangerCert.CertFile, KeyFile: strangerCert.KeyFile}, false},
		{"plain text to a TLS worker", tlsWorker, gateway.WorkerTLSConfig{}, false},
		{"worker CA not trusted", tlsWorker, gateway.WorkerTLSConfig{CAFile: otherCA.File}, false},
		{"wrong server name", tlsWorker, gateway.WorkerTLSConfig{CAFile: workerCA.File, ServerName: "calculator.example"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			logs := &lockedBuffer{}
			g := startGateway(t, gateway.Config{Workers: []string{tt.worker}, WorkerTLS: tt.tls,
				Auth: gateway.AuthConfig{Disabled: true}, Logger: slog.New(slog.NewTextHandler(logs, nil))})
			if tt.ok {
				waitTool(t, g, "Calculator.Add@1.0.0")
				r, err := g.Call(t.Context(), anon(), &toolfleetv1.CallToolRequest{ToolId: "Calculator.Add", Input: addInput(2, 3)})
				if err != nil || r.GetValue().GetStructValue().GetFields()["result"].GetNumberValue() != 5 {
					t.Fatalf("call over TLS: %v %v", r, err)
				}
				return
			}
			waitFor(t, "the gateway to fail loading the worker", func() bool {
				return strings.Contains(logs.String(), "worker contracts not loaded")
			})
			if _, err := g.GetTool(&toolfleetv1.GetToolRequest{ToolId: "Calculator.Add"}); err == nil {
				t.Fatal("the worker joined")
			}
		})
	}
}

// TestWorkerTLSConfigErrors: bad files fail gateway.New, not every call.
func TestWorkerTLSConfigErrors(t *testing.T) {
	t.Parallel()
	ca := testcerts.NewCA(t, "ca")
	for _, c := range []gateway.WorkerTLSConfig{
		{CAFile: "/nonexistent.pem"},
		{CAFile: ca.File, CertFile: ca.File}, // no key
		{CertFile: "/nonexistent.pem", KeyFile: "/nonexistent-key.pem"},
	} {
		_, err := gateway.New(t.Context(), gateway.Config{Listen: "127.0.0.1:0", Auth: gateway.AuthConfig{Disabled: true}, WorkerTLS: c, Logger: quiet()})
		if !errors.Is(err, gateway.ErrWorkerTLS) {
			t.Errorf("New with %+v: %v, want ErrWorkerTLS", c, err)
		}
	}
}
