// Package tlsreload serves a certificate and key from files and reads them again
// when they change, so that a rotated certificate (e.g. a Kubernetes Secret
// renewed by cert-manager) takes effect on new connections without a restart;
// and reads CA files into pools ([CertPool]) for every TLS configuration of the
// fleet.
package tlsreload

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// DefaultCheckEvery is how often [KeyPair] looks at the files' modification times.
const DefaultCheckEvery = 10 * time.Second

// KeyPair is a certificate and key loaded from files. Use [KeyPair.GetCertificate]
// or [KeyPair.GetClientCertificate] in a tls.Config.
type KeyPair struct {
	certFile, keyFile string
	checkEvery        time.Duration

	mu      sync.Mutex
	cert    *tls.Certificate
	mod     [2]time.Time // of certFile and keyFile when cert was loaded
	checked time.Time
}

// Load reads the pair now (an error here is a configuration error) and returns
// a KeyPair that reloads it when either file's modification time changes, looked
// at no more often than checkEvery (0 means every handshake; negative means
// DefaultCheckEvery).
func Load(certFile, keyFile string, checkEvery time.Duration) (*KeyPair, error) {
	if checkEvery < 0 {
		checkEvery = DefaultCheckEvery
	}
	k := &KeyPair{certFile: certFile, keyFile: keyFile, checkEvery: checkEvery}
	if err := k.reload(); err != nil {
		return nil, err
	}
	return k, nil
}

func (k *KeyPair) modTimes() ([2]time.Time, error) {
	var out [2]time.Time
	for i, f := range [2]string{k.certFile, k.keyFile} {
		st, err := os.Stat(f)
		if err != nil {
			return out, err
		}
		out[i] = st.ModTime()
	}
	return out, nil
}

// reload loads the pair; the caller holds mu or owns k.
func (k *KeyPair) reload() error {
	mod, err := k.modTimes()
	if err != nil {
		return fmt.Errorf("tlsreload: %w", err)
	}
	cert, err := tls.LoadX509KeyPair(k.certFile, k.keyFile)
	if err != nil {
		return fmt.Errorf("tlsreload: %w", err)
	}
	k.cert, k.mod = &cert, mod
	return nil
}

// current returns the pair, loading it again first when the files changed. A
// pair that fails to load (e.g. the certificate was written but not yet its
// key) leaves the previous one in use until the next check.
func (k *KeyPair) current() *tls.Certificate {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := time.Now()
	if now.Sub(k.checked) < k.checkEvery {
		return k.cert
	}
	k.checked = now
	if mod, err := k.modTimes(); err == nil && mod != k.mod {
		_ = k.reload()
	}
	return k.cert
}

// GetCertificate is for tls.Config.GetCertificate (servers).
func (k *KeyPair) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return k.current(), nil
}

// GetClientCertificate is for tls.Config.GetClientCertificate (clients).
func (k *KeyPair) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return k.current(), nil
}

// ErrNoCertificate: a CA file holds no PEM certificate.
var ErrNoCertificate = errors.New("holds no PEM certificate")

// CertPool reads a CA file (PEM, one or more certificates) into a pool. A CA
// file is read once: a rotated CA is a new trust decision, taken at a restart.
func CertPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s %w", file, ErrNoCertificate)
	}
	return pool, nil
}
