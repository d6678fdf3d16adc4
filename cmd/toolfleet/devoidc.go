package main

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/toolfleet/toolfleet/services/console"
	"github.com/toolfleet/toolfleet/services/gateway"
)

// devOIDC is `toolfleet dev` with an identity provider: the gateway also
// accepts the provider's RS256/ES256 tokens (its JWKS, issuer and audience
// rules), and the console signs people in with OpenID Connect
// (authorization code with PKCE) and calls the APIs with their access
// tokens. The HS256 dev secret stays: the orchestrator's own calls use it.
type devOIDC struct {
	// JWKSURL, Issuer and Audience are the gateway's rules for the
	// provider's tokens.
	JWKSURL, Issuer, Audience string
	// Console sign-in.
	ConsoleIssuer, ClientID, ClientSecretFile, ConsoleAudience, RedirectURL string
	Scopes                                                                  []string
}

// maxClientSecret bounds the client secret file.
const maxClientSecret = 64 << 10

func (o *devOIDC) addFlags(f *pflag.FlagSet) {
	f.StringVar(&o.JWKSURL, "gateway-jwks-url", "", "JSON Web Key Set URL of an identity provider whose RS256/ES256 tokens the gateway accepts beside the HS256 dev tokens (its discovery document's jwks_uri; http only on loopback); needs --gateway-jwt-secret")
	f.StringVar(&o.Issuer, "gateway-jwt-issuer", "", "issuer the identity provider's tokens must carry (default: --console-oidc-issuer)")
	f.StringVar(&o.Audience, "gateway-jwt-audience", "", "audience the identity provider's tokens must carry; empty = not checked")
	f.StringVar(&o.ConsoleIssuer, "console-oidc-issuer", "", "OpenID Connect issuer the console signs people in with (docs/console.md); needs --gateway-jwks-url")
	f.StringVar(&o.ClientID, "console-oidc-client-id", "", "the console's client id at the OpenID Connect provider")
	f.StringVar(&o.ClientSecretFile, "console-oidc-client-secret-file", "", "file holding the console's client secret; empty = a public client (PKCE only)")
	f.StringSliceVar(&o.Scopes, "console-oidc-scopes", nil, "scopes the console asks for at sign-in (default openid, offline_access and the runs:/programs: scopes its pages use)")
	f.StringVar(&o.ConsoleAudience, "console-oidc-audience", "", "audience parameter of the sign-in request (Hydra, Auth0: the access token's aud; match --gateway-jwt-audience)")
	f.StringVar(&o.RedirectURL, "console-oidc-redirect-url", "", "callback registered at the provider; default http://HOST:PORT/console/oidc/callback of the gateway")
}

// validate checks o against dev's other settings.
func (o devOIDC) validate(jwtSecret string) error {
	if o.ConsoleIssuer == "" && (o.ClientID != "" || o.ClientSecretFile != "" || len(o.Scopes) > 0 || o.ConsoleAudience != "" || o.RedirectURL != "") {
		return errors.New("the --console-oidc-* flags need --console-oidc-issuer")
	}
	if o.JWKSURL == "" && (o.Issuer != "" || o.Audience != "") {
		return errors.New("--gateway-jwt-issuer and --gateway-jwt-audience are rules for the tokens of --gateway-jwks-url: set it too")
	}
	if o.ConsoleIssuer != "" {
		if o.ClientID == "" {
			return errors.New("--console-oidc-issuer needs --console-oidc-client-id (the console's client at the provider)")
		}
		if o.JWKSURL == "" {
			return errors.New("--console-oidc-issuer: the console calls the APIs with the provider's access tokens, so the gateway must accept them: set --gateway-jwks-url to the provider's JWKS (jwks_uri in " + strings.TrimSuffix(o.ConsoleIssuer, "/") + "/.well-known/openid-configuration)")
		}
		if err := httpsOrLoopback("--console-oidc-issuer", o.ConsoleIssuer); err != nil {
			return err
		}
	}
	if o.JWKSURL != "" {
		if jwtSecret == "" {
			return errors.New("--gateway-jwks-url needs --gateway-jwt-secret: the orchestrator's own calls to the gateway use HS256 tokens with that secret")
		}
		if err := httpsOrLoopback("--gateway-jwks-url", o.JWKSURL); err != nil {
			return err
		}
	}
	return nil
}

// httpsOrLoopback refuses a URL that is neither https nor on a loopback host.
func httpsOrLoopback(flag, raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return fmt.Errorf("%s %q: not a URL", flag, raw)
	}
	if u.Scheme == "https" || (u.Scheme == "http" && isLoopback(u.Hostname())) {
		return nil
	}
	return fmt.Errorf("%s %q: https only, or http on a loopback host", flag, raw)
}

// apply adds the provider's key source and rules to the gateway's auth.
func (o devOIDC) apply(auth *gateway.AuthConfig) {
	if o.JWKSURL == "" {
		return
	}
	auth.JWKSURL, auth.Issuer, auth.Audience = o.JWKSURL, o.Issuer, o.Audience
	if auth.Issuer == "" {
		auth.Issuer = o.ConsoleIssuer
	}
}

// banner prints the provider's lines of dev's banner (none without one).
func (o devOIDC) banner(w io.Writer) {
	if o.JWKSURL == "" {
		return
	}
	var auth gateway.AuthConfig
	o.apply(&auth)
	rules := "iss " + auth.Issuer
	if auth.Issuer == "" {
		rules = "any iss"
	}
	if auth.Audience != "" {
		rules += ", aud " + auth.Audience
	}
	fmt.Fprintf(w, "  IdP tokens   RS256/ES256 tokens verified with %s (%s) are accepted beside the HS256 dev tokens\n", o.JWKSURL, rules)
	if o.ConsoleIssuer != "" {
		fmt.Fprintf(w, "  Sign-in      OpenID Connect at %s (client %s): the console's \"Sign in with\" link\n", o.ConsoleIssuer, o.ClientID)
	}
}

// console is the console's sign-in configuration (nil without an issuer).
func (o devOIDC) console() (*console.OIDCConfig, error) {
	if o.ConsoleIssuer == "" {
		return nil, nil
	}
	c := &console.OIDCConfig{Issuer: o.ConsoleIssuer, ClientID: o.ClientID, Scopes: o.Scopes,
		Audience: o.ConsoleAudience, RedirectURL: o.RedirectURL}
	if o.ClientSecretFile != "" {
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
	}
	return c, nil
}
