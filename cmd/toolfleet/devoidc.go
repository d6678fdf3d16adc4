package main

import (
	"errors"
	"fmt"
	"io"
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
	// Console is the console's sign-in (--console-oidc-*).
	Console console.OIDCFlags
}

func (o *devOIDC) addFlags(f *pflag.FlagSet) {
	f.StringVar(&o.JWKSURL, "gateway-jwks-url", "", "JSON Web Key Set URL of an identity provider whose RS256/ES256 tokens the gateway accepts beside the HS256 dev tokens (its discovery document's jwks_uri; http only on loopback); needs --gateway-jwt-secret")
	f.StringVar(&o.Issuer, "gateway-jwt-issuer", "", "issuer the identity provider's tokens must carry (default: --console-oidc-issuer)")
	f.StringVar(&o.Audience, "gateway-jwt-audience", "", "audience the identity provider's tokens must carry; empty = not checked")
	o.Console.AddFlags(f)
}

// validate checks o against dev's other settings.
func (o devOIDC) validate(jwtSecret string) error {
	if err := o.Console.Validate(false); err != nil {
		return err
	}
	if o.JWKSURL == "" && (o.Issuer != "" || o.Audience != "") {
		return errors.New("--gateway-jwt-issuer and --gateway-jwt-audience are rules for the tokens of --gateway-jwks-url: set it too")
	}
	if o.Console.Enabled() && o.JWKSURL == "" {
		return errors.New("--console-oidc-issuer: the console calls the APIs with the provider's access tokens, so the gateway must accept them: set --gateway-jwks-url to the provider's JWKS (jwks_uri in " + strings.TrimSuffix(o.Console.Issuer, "/") + "/.well-known/openid-configuration)")
	}
	if o.JWKSURL != "" {
		if jwtSecret == "" {
			return errors.New("--gateway-jwks-url needs --gateway-jwt-secret: the orchestrator's own calls to the gateway use HS256 tokens with that secret")
		}
		if err := console.HTTPSOrLoopback("--gateway-jwks-url", o.JWKSURL); err != nil {
			return err
		}
	}
	return nil
}

// apply adds the provider's key source and rules to the gateway's auth.
func (o devOIDC) apply(auth *gateway.AuthConfig) {
	if o.JWKSURL == "" {
		return
	}
	auth.JWKSURL, auth.Issuer, auth.Audience = o.JWKSURL, o.Issuer, o.Audience
	if auth.Issuer == "" {
		auth.Issuer = o.Console.Issuer
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
	if o.Console.Enabled() {
		fmt.Fprintf(w, "  Sign-in      OpenID Connect at %s (client %s): the console's \"Sign in with\" link\n", o.Console.Issuer, o.Console.ClientID)
	}
}

// console is the console's sign-in configuration (nil without an issuer).
func (o devOIDC) console() (*console.OIDCConfig, error) { return o.Console.Config() }
