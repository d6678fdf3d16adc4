package runner

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writePair writes a self-signed certificate and its key as PEM files.
func writePair(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "orchestrator"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

func TestTemporalTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cert, key := writePair(t, dir)
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not pem"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		tls     TemporalTLS
		wantErr string
	}{
		{"off", TemporalTLS{}, ""},
		{"CA and client pair", TemporalTLS{CAFile: cert, CertFile: cert, KeyFile: key, ServerName: "temporal.example"}, ""},
		{"CA without PEM", TemporalTLS{CAFile: garbage}, "no PEM certificate"},
		{"mismatched pair", TemporalTLS{CertFile: cert, KeyFile: garbage}, "client certificate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := tt.tls.config()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("config() = %v, want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tt.tls.Enabled() {
				if cfg != nil {
					t.Fatal("TLS on without a setting")
				}
				return
			}
			if cfg.ServerName != tt.tls.ServerName || cfg.RootCAs == nil || cfg.MinVersion < tls.VersionTLS12 {
				t.Fatalf("config %+v", cfg)
			}
			c, err := cfg.GetClientCertificate(&tls.CertificateRequestInfo{})
			if err != nil || len(c.Certificate) == 0 {
				t.Fatalf("client certificate: %v", err)
			}
		})
	}
}
