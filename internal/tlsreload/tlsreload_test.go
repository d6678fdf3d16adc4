package tlsreload_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/internal/testcerts"
	"github.com/toolfleet/toolfleet/internal/tlsreload"
)

// TestKeyPairReloads: a rewritten pair is served from the next handshake on; a
// half-written one (new certificate, old key) keeps the previous pair in use.
func TestKeyPairReloads(t *testing.T) {
	t.Parallel()
	ca := testcerts.NewCA(t, "ca")
	a, b := ca.Server(t, "a"), ca.Server(t, "b")
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	stamp := time.Now()
	put := func(src, dst string) {
		t.Helper()
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, data, 0o600); err != nil {
			t.Fatal(err)
		}
		stamp = stamp.Add(time.Second) // a new modification time even on coarse clocks
		if err := os.Chtimes(dst, stamp, stamp); err != nil {
			t.Fatal(err)
		}
	}
	put(a.CertFile, certFile)
	put(a.KeyFile, keyFile)
	kp, err := tlsreload.Load(certFile, keyFile, 0)
	if err != nil {
		t.Fatal(err)
	}
	serial := func() string {
		t.Helper()
		c, err := kp.GetCertificate(nil)
		if err != nil {
			t.Fatal(err)
		}
		return string(c.Certificate[0])
	}
	if serial() != string(a.TLS.Certificate[0]) {
		t.Fatal("not serving a")
	}
	put(b.CertFile, certFile) // the key is still a's: a mismatched pair
	if serial() != string(a.TLS.Certificate[0]) {
		t.Fatal("a half-written pair replaced a")
	}
	put(b.KeyFile, keyFile)
	if serial() != string(b.TLS.Certificate[0]) {
		t.Fatal("the rotated pair b is not served")
	}
	if _, err := tlsreload.Load(filepath.Join(dir, "missing.crt"), keyFile, 0); err == nil {
		t.Fatal("a missing file loaded")
	}
}
