package tool

import (
	"crypto/tls"
	"errors"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/toolfleet/toolfleet/internal/tlsreload"
)

// Environment variables read by [Main] as the defaults of its TLS flags.
const (
	EnvTLSCert     = "TOOLFLEET_TLS_CERT"
	EnvTLSKey      = "TOOLFLEET_TLS_KEY"
	EnvTLSClientCA = "TOOLFLEET_TLS_CLIENT_CA"
)

// ErrTLS is wrapped by errors of a [TLSConfig].
var ErrTLS = errors.New("tool: TLS")

// TLSConfig makes a worker serve gRPC over TLS, and with ClientCAFile require
// every caller to show a certificate signed by one of those CAs (mTLS), so that
// only the gateway (the holder of such a certificate) can call the worker. The
// zero value serves plain text (h2c).
type TLSConfig struct {
	// CertFile and KeyFile are the worker's certificate and key (PEM). They are
	// read again when they change (checked every 10 s at most), so a rotated
	// certificate is served to new connections without a restart.
	CertFile, KeyFile string
	// ClientCAFile is a PEM file of the CAs that sign callers' certificates;
	// setting it requires a client certificate on every connection.
	ClientCAFile string
}

// On reports whether the worker serves TLS.
func (c TLSConfig) On() bool { return c.CertFile != "" || c.KeyFile != "" || c.ClientCAFile != "" }

// serverOption returns the gRPC server credentials; files are read now.
func (c TLSConfig) serverOption() (grpc.ServerOption, error) {
	if c.CertFile == "" || c.KeyFile == "" {
		return nil, fmt.Errorf("%w: serving TLS needs both a certificate and a key file", ErrTLS)
	}
	// Read again when the files change, so a rotated certificate needs no restart.
	kp, err := tlsreload.Load(c.CertFile, c.KeyFile, tlsreload.DefaultCheckEvery)
	if err != nil {
		return nil, fmt.Errorf("%w: certificate: %w", ErrTLS, err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: kp.GetCertificate}
	if c.ClientCAFile != "" {
		pool, err := tlsreload.CertPool(c.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("%w: client CA file: %w", ErrTLS, err)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return grpc.Creds(credentials.NewTLS(cfg)), nil
}
