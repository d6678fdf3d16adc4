package main

import (
	"errors"
	"net"

	"github.com/spf13/pflag"

	"github.com/toolfleet/toolfleet/services/console"
	"github.com/toolfleet/toolfleet/services/gateway"
)

// consoleConfig is the run console of the gateway binary (docs/console.md):
// off unless --console; people sign in with the operator's OpenID Connect
// provider (--console-oidc-*), or paste a bearer token. There is no dev
// sign-in here: minting tokens is for `toolfleet dev` only.
type consoleConfig struct {
	Enabled bool
	OIDC    console.OIDCFlags
}

func (c *consoleConfig) addFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&c.Enabled, "console", false, "serve the run console at /console/ on the gateway's port (docs/console.md)")
	c.OIDC.AddFlags(fs)
}

// validate checks the console's settings against the gateway's auth.
func (c consoleConfig) validate(cfg *Config) error {
	if !c.Enabled {
		if c.OIDC.Enabled() {
			return errors.New("--console-oidc-issuer needs --console")
		}
		return nil
	}
	// Off loopback the request's Host header must not choose the callback.
	if err := c.OIDC.Validate(!loopback(cfg.Listen)); err != nil {
		return err
	}
	if c.OIDC.Enabled() && cfg.JWKSFile == "" && cfg.JWKSURL == "" {
		return errors.New("--console-oidc-issuer: the console calls the APIs with the provider's access tokens, so the gateway must accept them: set --jwt-jwks-url (or --jwt-jwks-file) to the provider's keys")
	}
	return nil
}

// server builds the console, or nil when it is off.
func (c consoleConfig) server(cfg *Config) (*console.Server, error) {
	if !c.Enabled {
		return nil, nil
	}
	oidc, err := c.OIDC.Config()
	if err != nil {
		return nil, err
	}
	return console.New(console.Config{AuthOff: cfg.AuthDisabled, OIDC: oidc})
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
