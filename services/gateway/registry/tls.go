package registry

import (
	"crypto/tls"
	"errors"
	"fmt"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/toolfleet/toolfleet/internal/tlsreload"
)

// Environment variables read by [TLSConfig.AddFlags] as the flags' defaults.
const (
	EnvWorkerTLS        = "TOOLFLEET_WORKER_TLS"
	EnvWorkerCA         = "TOOLFLEET_WORKER_CA"
	EnvWorkerCert       = "TOOLFLEET_WORKER_CERT"
	EnvWorkerKey        = "TOOLFLEET_WORKER_KEY"
	EnvWorkerServerName = "TOOLFLEET_WORKER_SERVER_NAME"
)

// ErrWorkerTLS is wrapped by errors of a [TLSConfig].
var ErrWorkerTLS = errors.New("gateway: worker TLS")

// TLSConfig says how the gateway connects to workers. The zero value dials
// in plain text (h2c), as `toolfleet dev` does on loopback. With TLS on, the
// gateway checks each worker's certificate against CAFile (default: the system's
// roots) for the host of the worker's address, or ServerName; with a client
// certificate it also proves itself to workers that require mTLS (sdk/tool:
// --tls-client-ca), so that only the gateway can call them.
type TLSConfig struct {
	// Enabled turns TLS on. Setting CAFile or CertFile turns it on too.
	Enabled bool
	// CAFile is a PEM file of the CAs that sign worker certificates.
	CAFile string
	// CertFile and KeyFile are the gateway's client certificate for mTLS. Both or
	// neither. They are read again when they change (checked every 10 s at most),
	// so a rotated certificate is used for new connections without a restart.
	CertFile, KeyFile string
	// ServerName, when set, is the name every worker certificate must carry
	// (e.g. one wildcard name for all workers) instead of the host dialed.
	ServerName string
}

// On reports whether the gateway dials workers with TLS.
func (c TLSConfig) On() bool { return c.Enabled || c.CAFile != "" || c.CertFile != "" }

// DialOption returns the transport credentials for dialing workers (pass it to
// [New]); the files are read now, so a bad one fails at start-up instead of
// every worker's load.
func (c TLSConfig) DialOption() (grpc.DialOption, error) {
	if !c.On() {
		return grpc.WithTransportCredentials(insecure.NewCredentials()), nil
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return nil, fmt.Errorf("%w: a client certificate needs both a cert and a key file", ErrWorkerTLS)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName}
	if c.CAFile != "" {
		pool, err := tlsreload.CertPool(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("%w: CA file: %w", ErrWorkerTLS, err)
		}
		cfg.RootCAs = pool
	}
	if c.CertFile != "" {
		// Read again when the files change, so a rotated certificate needs no restart.
		kp, err := tlsreload.Load(c.CertFile, c.KeyFile, tlsreload.DefaultCheckEvery)
		if err != nil {
			return nil, fmt.Errorf("%w: client certificate: %w", ErrWorkerTLS, err)
		}
		cfg.GetClientCertificate = kp.GetClientCertificate
	}
	return grpc.WithTransportCredentials(credentials.NewTLS(cfg)), nil
}

// FlagSet is what [TLSConfig.AddFlags] needs: both the standard library's
// *flag.FlagSet and spf13/pflag's *pflag.FlagSet have it.
type FlagSet interface {
	StringVar(p *string, name, value, usage string)
	BoolVar(p *bool, name string, value bool, usage string)
}

// AddFlags registers --worker-tls, --worker-ca, --worker-cert, --worker-key and
// --worker-server-name on fs, with defaults from the TOOLFLEET_WORKER_*
// environment variables.
func (c *TLSConfig) AddFlags(fs FlagSet) {
	fs.BoolVar(&c.Enabled, "worker-tls", os.Getenv(EnvWorkerTLS) == "true", "dial workers with TLS (env "+EnvWorkerTLS+")")
	fs.StringVar(&c.CAFile, "worker-ca", os.Getenv(EnvWorkerCA), "PEM file of CAs that sign worker certificates; turns worker TLS on (env "+EnvWorkerCA+")")
	fs.StringVar(&c.CertFile, "worker-cert", os.Getenv(EnvWorkerCert), "client certificate the gateway shows workers (mTLS) (env "+EnvWorkerCert+")")
	fs.StringVar(&c.KeyFile, "worker-key", os.Getenv(EnvWorkerKey), "key of --worker-cert (env "+EnvWorkerKey+")")
	fs.StringVar(&c.ServerName, "worker-server-name", os.Getenv(EnvWorkerServerName), "name every worker certificate must carry; default: the host dialed (env "+EnvWorkerServerName+")")
}
