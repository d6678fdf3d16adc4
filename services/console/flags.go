package console

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/toolfleet/toolfleet/internal/loopback"
)

// OIDCFlags are the console's OpenID Connect sign-in settings as command-line
// flags (--console-oidc-*), shared by `toolfleet dev` and the gateway binary
// so both spell and check them the same way.
type OIDCFlags struct {
	Issuer, ClientID, ClientSecretFile, Audience, RedirectURL string
	Scopes                                                    []string
}

// maxClientSecret bounds the client secret file: a mistaken path must not be
// read into memory whole.
const maxClientSecret = 64 << 10

// AddFlags registers the --console-oidc-* flags on f.
func (o *OIDCFlags) AddFlags(f *pflag.FlagSet) {
	f.StringVar(&o.Issuer, "console-oidc-issuer", "", "OpenID Connect issuer the console signs people in with (docs/console.md); the gateway must accept its tokens")
	f.StringVar(&o.ClientID, "console-oidc-client-id", "", "the console's client id at the OpenID Connect provider")
	f.StringVar(&o.ClientSecretFile, "console-oidc-client-secret-file", "", "file holding the console's client secret; empty = a public client (PKCE only)")
	f.StringSliceVar(&o.Scopes, "console-oidc-scopes", nil, "scopes the console asks for at sign-in (default openid, offline_access and the runs:/programs: scopes its pages use)")
	f.StringVar(&o.Audience, "console-oidc-audience", "", "audience parameter of the sign-in request (Hydra, Auth0: the access token's aud; match the gateway's audience rule)")
	f.StringVar(&o.RedirectURL, "console-oidc-redirect-url", "", "callback registered at the provider, e.g. https://HOST/console/oidc/callback")
}

// Enabled reports whether sign-in with a provider is configured.
func (o OIDCFlags) Enabled() bool { return o.Issuer != "" }

// Validate checks the flags on their own: an issuer with a client, no
// console flag without an issuer, https (or http on loopback) URLs. When
// needRedirect is set (a server not on loopback, where the request's Host
// header must not choose the callback), the redirect URL is required.
func (o OIDCFlags) Validate(needRedirect bool) error {
	if o.Issuer == "" {
		if o.ClientID != "" || o.ClientSecretFile != "" || len(o.Scopes) > 0 || o.Audience != "" || o.RedirectURL != "" {
			return errors.New("the --console-oidc-* flags need --console-oidc-issuer")
		}
		return nil
	}
	if o.ClientID == "" {
		return errors.New("--console-oidc-issuer needs --console-oidc-client-id (the console's client at the provider)")
	}
	if err := HTTPSOrLoopback("--console-oidc-issuer", o.Issuer); err != nil {
		return err
	}
	if o.RedirectURL == "" && needRedirect {
		return errors.New("--console-oidc-issuer needs --console-oidc-redirect-url off loopback (the callback registered at the provider, e.g. https://HOST/console/oidc/callback)")
	}
	if o.RedirectURL != "" {
		if err := HTTPSOrLoopback("--console-oidc-redirect-url", o.RedirectURL); err != nil {
			return err
		}
	}
	return nil
}

// Config is the sign-in configuration the flags describe (nil without an
// issuer); it reads the client secret file.
func (o OIDCFlags) Config() (*OIDCConfig, error) {
	if o.Issuer == "" {
		return nil, nil
	}
	c := &OIDCConfig{Issuer: o.Issuer, ClientID: o.ClientID, Scopes: o.Scopes, Audience: o.Audience, RedirectURL: o.RedirectURL}
	if o.ClientSecretFile == "" {
		return c, nil
	}
	f, err := os.Open(o.ClientSecretFile)
	if err != nil {
		return nil, fmt.Errorf("--console-oidc-client-secret-file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxClientSecret+1))
	if err != nil {
		return nil, fmt.Errorf("--console-oidc-client-secret-file: %w", err)
	}
	if len(b) > maxClientSecret {
		return nil, fmt.Errorf("--console-oidc-client-secret-file: over %d KiB", maxClientSecret>>10)
	}
	if c.ClientSecret = strings.TrimSpace(string(b)); c.ClientSecret == "" {
		return nil, errors.New("--console-oidc-client-secret-file is empty")
	}
	return c, nil
}

// HTTPSOrLoopback refuses a URL that is neither https nor http on a loopback
// host; flag names the setting in the error.
func HTTPSOrLoopback(flag, raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return fmt.Errorf("%s %q: not a URL", flag, raw)
	}
	if u.Scheme == "https" || (u.Scheme == "http" && loopback.Host(u.Hostname())) {
		return nil
	}
	return fmt.Errorf("%s %q: https only, or http on a loopback host", flag, raw)
}

// maxSessionSecret bounds the session key file.
const maxSessionSecret = 4 << 10

// minSessionSecret is the shortest secret a session key file may hold.
const minSessionSecret = 32

// SessionSecretFile reads the secret the replicas derive their session key
// from ([SessionKey]): a file of at least 32 characters, e.g. the output of
// `openssl rand -base64 32`, the same on every replica.
func SessionSecretFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--console-session-key-file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxSessionSecret+1))
	if err != nil {
		return nil, fmt.Errorf("--console-session-key-file: %w", err)
	}
	b = []byte(strings.TrimSpace(string(b)))
	if len(b) > maxSessionSecret || len(b) < minSessionSecret {
		return nil, fmt.Errorf("--console-session-key-file: want a secret of %d bytes to %d KiB (e.g. `openssl rand -base64 32`), not %d bytes", minSessionSecret, maxSessionSecret>>10, len(b))
	}
	return b, nil
}
