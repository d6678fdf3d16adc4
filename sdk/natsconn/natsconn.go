// Package natsconn holds how every toolfleet component authenticates to NATS and
// trusts it: credentials (a .creds file, an NKey seed, user and password, or a
// token) and TLS (a CA to trust, a client certificate for mTLS). The gateway,
// workers built with sdk/tool, the orchestrator and the CLI take the same
// [Options], the same flags ([Options.AddFlags]) and the same environment
// variables, and turn them into nats.Option values with [Options.NATSOptions].
//
// It is public (not under internal/) because a worker's tool.Config carries it,
// and tool authors outside this module must be able to fill it in.
//
// The zero Options connect without credentials and without TLS (unless the URL
// says tls://), as `toolfleet dev` does on loopback.
package natsconn

import (
	"errors"
	"fmt"
	"os"

	"github.com/nats-io/nats.go"
)

// Environment variables read by [Options.AddFlags] as the flags' defaults.
const (
	EnvCreds    = "TOOLFLEET_NATS_CREDS"
	EnvNKey     = "TOOLFLEET_NATS_NKEY"
	EnvUser     = "TOOLFLEET_NATS_USER"
	EnvPassword = "TOOLFLEET_NATS_PASSWORD"
	EnvToken    = "TOOLFLEET_NATS_TOKEN"
	EnvCA       = "TOOLFLEET_NATS_CA"
	EnvCert     = "TOOLFLEET_NATS_CERT"
	EnvKey      = "TOOLFLEET_NATS_KEY"
)

// ErrInvalid is wrapped by every error of [Options.Validate].
var ErrInvalid = errors.New("natsconn: invalid NATS connection options")

// Options say how to authenticate to a NATS server and which server to trust.
// At most one of CredsFile, NKeySeedFile, User (with Password) and Token may be
// set: a NATS server checks one method per connection.
type Options struct {
	// CredsFile is a .creds file (user JWT and NKey seed), as `nsc` writes it
	// for NATS's decentralized auth.
	CredsFile string
	// NKeySeedFile is a file holding a user NKey seed ("SU..."); the server knows
	// the matching public key.
	NKeySeedFile string
	// User and Password authenticate with a user name and password.
	User, Password string
	// Token authenticates with a shared token.
	Token string
	// CAFile is a PEM file of the CAs to trust for the server's certificate.
	// Setting it (or a client certificate, or a tls:// URL) turns TLS on.
	// Default: the system's roots.
	CAFile string
	// CertFile and KeyFile are the client certificate and key for mTLS. Both or
	// neither. They are read again on every reconnection, so a rotated
	// certificate takes effect without a restart.
	CertFile, KeyFile string
}

// Validate reports conflicting or incomplete options.
func (o Options) Validate() error {
	var methods []string
	if o.CredsFile != "" {
		methods = append(methods, "creds file")
	}
	if o.NKeySeedFile != "" {
		methods = append(methods, "NKey seed")
	}
	if o.User != "" {
		methods = append(methods, "user/password")
	}
	if o.Token != "" {
		methods = append(methods, "token")
	}
	if len(methods) > 1 {
		return fmt.Errorf("%w: set one of creds file, NKey seed, user/password and token, not %v", ErrInvalid, methods)
	}
	if o.Password != "" && o.User == "" {
		return fmt.Errorf("%w: a password needs a user", ErrInvalid)
	}
	if (o.CertFile == "") != (o.KeyFile == "") {
		return fmt.Errorf("%w: a client certificate needs both a cert and a key file", ErrInvalid)
	}
	return nil
}

// TLS reports whether the options turn TLS on (a tls:// URL does too).
func (o Options) TLS() bool { return o.CAFile != "" || o.CertFile != "" }

// NATSOptions validates o and returns the nats.Option values that apply it. Files
// are read now, so a missing or malformed one is an error here rather than at
// every reconnection.
func (o Options) NATSOptions() ([]nats.Option, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	var opts []nats.Option
	switch {
	case o.CredsFile != "":
		if _, err := os.Stat(o.CredsFile); err != nil {
			return nil, fmt.Errorf("natsconn: creds file: %w", err)
		}
		opts = append(opts, nats.UserCredentials(o.CredsFile))
	case o.NKeySeedFile != "":
		opt, err := nats.NkeyOptionFromSeed(o.NKeySeedFile)
		if err != nil {
			return nil, fmt.Errorf("natsconn: NKey seed: %w", err)
		}
		opts = append(opts, opt)
	case o.User != "":
		opts = append(opts, nats.UserInfo(o.User, o.Password))
	case o.Token != "":
		opts = append(opts, nats.Token(o.Token))
	}
	if o.CAFile != "" {
		opts = append(opts, nats.RootCAs(o.CAFile))
	}
	if o.CertFile != "" {
		opts = append(opts, nats.ClientCert(o.CertFile, o.KeyFile))
	}
	// nats.RootCAs and nats.ClientCert read their files when applied: apply them
	// once now so that errors surface here.
	var probe nats.Options
	for _, opt := range opts {
		if err := opt(&probe); err != nil {
			return nil, fmt.Errorf("natsconn: %w", err)
		}
	}
	return opts, nil
}

// Connect connects to url with o, naming the connection name, followed by extra
// options (reconnect policy, handlers).
func (o Options) Connect(url, name string, extra ...nats.Option) (*nats.Conn, error) {
	opts, err := o.NATSOptions()
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(url, append(append(opts, nats.Name(name)), extra...)...)
	if err != nil {
		return nil, fmt.Errorf("natsconn: connect to %s: %w", url, err)
	}
	return nc, nil
}

// FlagSet is what [Options.AddFlags] needs: both the standard library's
// *flag.FlagSet and spf13/pflag's *pflag.FlagSet have it.
type FlagSet interface {
	StringVar(p *string, name, value, usage string)
}

// AddFlags registers --nats-creds, --nats-nkey, --nats-user, --nats-password,
// --nats-token, --nats-ca, --nats-cert and --nats-key on fs, with defaults from
// the TOOLFLEET_NATS_* environment variables (EnvCreds and so on). Prefer the
// environment (or a file) for the password and the token: flags show in `ps`.
func (o *Options) AddFlags(fs FlagSet) {
	fs.StringVar(&o.CredsFile, "nats-creds", os.Getenv(EnvCreds), "NATS .creds file (JWT + NKey seed) (env "+EnvCreds+")")
	fs.StringVar(&o.NKeySeedFile, "nats-nkey", os.Getenv(EnvNKey), "file with a NATS user NKey seed (env "+EnvNKey+")")
	fs.StringVar(&o.User, "nats-user", os.Getenv(EnvUser), "NATS user name (env "+EnvUser+")")
	fs.StringVar(&o.Password, "nats-password", os.Getenv(EnvPassword), "NATS password; prefer the env var (env "+EnvPassword+")")
	fs.StringVar(&o.Token, "nats-token", os.Getenv(EnvToken), "NATS token; prefer the env var (env "+EnvToken+")")
	fs.StringVar(&o.CAFile, "nats-ca", os.Getenv(EnvCA), "PEM file of CAs to trust for the NATS server; turns TLS on (env "+EnvCA+")")
	fs.StringVar(&o.CertFile, "nats-cert", os.Getenv(EnvCert), "client certificate for NATS mTLS (env "+EnvCert+")")
	fs.StringVar(&o.KeyFile, "nats-key", os.Getenv(EnvKey), "client key for NATS mTLS (env "+EnvKey+")")
}
