package tool_test

import (
	"errors"
	"testing"

	"github.com/toolfleet/toolfleet/internal/testcerts"
	"github.com/toolfleet/toolfleet/sdk/tool"
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
