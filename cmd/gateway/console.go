package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/pflag"

	"github.com/toolfleet/toolfleet/internal/loopback"
	"github.com/toolfleet/toolfleet/services/console"
	"github.com/toolfleet/toolfleet/services/gateway"
)

// consoleConfig is the run console of the gateway binary (docs/console.md):
// off unless --console; people sign in with the operator's OpenID Connect
// provider (--console-oidc-*), or paste a bearer token. There is no dev
// sign-in here: minting tokens is for `toolfleet dev` only. With NATS the
// sessions live in a KV bucket every replica shares.
type consoleConfig struct {
	Enabled        bool
	OIDC           console.OIDCFlags
	SessionKeyFile string
}

func (c *consoleConfig) addFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&c.Enabled, "console", false, "serve the run console at /console/ on the gateway's port (docs/console.md)")
	fs.StringVar(&c.SessionKeyFile, "console-session-key-file", "", "file of a secret (32+ bytes, e.g. `openssl rand -base64 32`), the same on every replica, sealing the console's sessions in NATS; empty: derived from the OIDC client secret, else per process (a browser then needs affinity)")
	c.OIDC.AddFlags(fs)
}

// validate checks the console's settings against the gateway's auth.
func (c consoleConfig) validate(cfg *Config) error {
	if !c.Enabled {
		if c.OIDC.Enabled() {
			return errors.New("--console-oidc-issuer needs --console")
		}
		if c.SessionKeyFile != "" {
			return errors.New("--console-session-key-file needs --console")
		}
		return nil
	}
	// Off loopback the request's Host header must not choose the callback.
	if err := c.OIDC.Validate(!loopback.Listen(cfg.Listen)); err != nil {
		return err
	}
	if c.OIDC.Enabled() && cfg.JWKSFile == "" && cfg.JWKSURL == "" {
		return errors.New("--console-oidc-issuer: the console calls the APIs with the provider's access tokens, so the gateway must accept them: set --jwt-jwks-url (or --jwt-jwks-file) to the provider's keys")
	}
	return nil
}

// server builds the console, or nil when it is off. With NATS it has a NATS
// connection of its own for the shared sessions, which closeFn ends.
func (c consoleConfig) server(cfg *Config, log *slog.Logger) (_ *console.Server, closeFn func(), _ error) {
	closeFn = func() {}
	if !c.Enabled {
		return nil, closeFn, nil
	}
	oidc, err := c.OIDC.Config()
	if err != nil {
		return nil, nil, err
	}
	cc := console.Config{AuthOff: cfg.AuthDisabled, OIDC: oidc}
	if cfg.NATSURL != "" {
		var secret []byte
		switch {
		case c.SessionKeyFile != "":
			if secret, err = console.SessionSecretFile(c.SessionKeyFile); err != nil {
				return nil, nil, err
			}
		case oidc != nil && oidc.ClientSecret != "":
			secret = []byte(oidc.ClientSecret)
		case !cfg.AuthDisabled:
			log.Warn("the console's sessions are sealed with a key of this process only: behind a load balancer a browser needs affinity; set --console-session-key-file on every replica")
		}
		nc, err := cfg.NATS.Connect(cfg.NATSURL, "toolfleet-gateway-console", nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1))
		if err != nil {
			return nil, nil, fmt.Errorf("console: NATS %s: %w", cfg.NATSURL, err)
		}
		js, err := jetstream.New(nc)
		if err != nil {
			nc.Close()
			return nil, nil, fmt.Errorf("console: JetStream: %w", err)
		}
		cc.Sessions = &console.SharedSessions{JetStream: js, Bucket: console.SessionBucket(cfg.Assets), Key: console.SessionKey(secret)}
		closeFn = nc.Close
	}
	s, err := console.New(cc)
	if err != nil {
		closeFn()
		return nil, nil, err
	}
	return s, closeFn, nil
}

// consoleMounts serves s at /console/ on the gateway's port.
func consoleMounts(s *console.Server) []gateway.Mount {
	if s == nil {
		return nil
	}
	return []gateway.Mount{{Pattern: s.Pattern(), Handler: s}}
}

// selfURL is how the console reaches the gateway it is mounted on: its own
// listen address, with an unspecified host (":8080", "0.0.0.0:8080") read as
// loopback. The port is plaintext h2c; TLS, if any, ends in front of it.
func selfURL(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "http://" + addr
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}
