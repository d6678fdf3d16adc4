package connections

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"

	"golang.org/x/oauth2"

	"github.com/toolfleet/toolfleet/internal/loopback"
	"github.com/toolfleet/toolfleet/sdk/tool/contract"
)

// ErrConfig is wrapped by every error of a provider configuration.
var ErrConfig = errors.New("connections: invalid provider configuration")

// Provider is an OAuth 2.0 authorization server the operator lets principals
// connect to, e.g. GitHub or the company's identity provider.
type Provider struct {
	// Name is how tool contracts name it (ToolCredential.provider), e.g.
	// "github": 1 to 64 characters of [a-z0-9_-].
	Name string `json:"name"`
	// Issuer is an OpenID Connect issuer; its discovery document supplies the
	// endpoints below that are left empty.
	Issuer string `json:"issuer,omitempty"`
	// AuthorizationURL, TokenURL and RevocationURL (RFC 7009, optional) are
	// the provider's endpoints.
	AuthorizationURL string `json:"authorization_url,omitempty"`
	TokenURL         string `json:"token_url,omitempty"`
	RevocationURL    string `json:"revocation_url,omitempty"`
	// ClientID is the gateway's client at the provider.
	ClientID string `json:"client_id"`
	// ClientSecretFile holds the client's secret (never inline in the
	// configuration). Empty: a public client (PKCE only).
	ClientSecretFile string `json:"client_secret_file,omitempty"`
	// Scopes are asked for on every connection besides the ones the tools
	// declare, e.g. "offline_access" for a refresh token.
	Scopes []string `json:"scopes,omitempty"`
	// AuthStyle is how the gateway authenticates at the token endpoint:
	// "basic" (client_secret_basic, the default) or "post" (client_secret_post).
	AuthStyle string `json:"auth_style,omitempty"`
	// NarrowScopes: the provider issues, on a refresh, an access token with
	// fewer scopes than the connection's (RFC 6749 §6); the worker then gets
	// a token with exactly the scopes its tool declares. Without it the worker
	// gets the connection's token, which carries every scope the principal
	// granted (the union of what its tools asked for).
	NarrowScopes bool `json:"narrow_scopes,omitempty"`
	// Params are extra authorization request parameters, e.g.
	// {"audience": "https://api.example.com"}.
	Params map[string]string `json:"params,omitempty"`
	// HTTPBackChannel lets the endpoints only the gateway calls (token_url,
	// revocation_url, the issuer's discovery) be plain http on any host, not
	// only on loopback: for a provider the gateway reaches over a network the
	// operator trusts, such as a Service of a development cluster whose
	// browser-facing address is a port-forward. The client secret, codes and
	// tokens then travel unencrypted; authorization_url, which browsers
	// open, must still be https (http only on loopback).
	HTTPBackChannel bool `json:"http_back_channel,omitempty"`

	// Exchange makes the provider the operator's own authorization server for
	// first-party APIs: nobody connects to it; the gateway exchanges each
	// call's principal for a token bound to the tool's audience (package
	// exchange). [ExchangeTokenExchange] (RFC 8693) or [ExchangeJWTBearer]
	// (RFC 7523); empty: a provider principals connect to.
	Exchange string `json:"exchange,omitempty"`
	// AssertionKeyFile is a PEM private key (RSA or EC P-256) the gateway
	// signs its JWT assertions with: required for jwt-bearer, and for
	// token-exchange to act for principals of agent runs and programs.
	AssertionKeyFile string `json:"assertion_key_file,omitempty"`
	// AssertionKeyID is the kid of the assertions' header (optional; the
	// authorization server may need it to pick the key).
	AssertionKeyID string `json:"assertion_key_id,omitempty"`

	secret string
}

// Values of Provider.Exchange.
const (
	ExchangeTokenExchange = "token-exchange"
	ExchangeJWTBearer     = "jwt-bearer"
)

// ClientSecret is the client's secret read from ClientSecretFile by
// [Provider.Resolve] ("" for a public client). Never log it.
func (p *Provider) ClientSecret() string { return p.secret }

// Resolve checks p, reads its secret and fills its endpoints from the
// issuer's discovery document when it names one: what [New] does for each
// provider, for the exchange providers New leaves to package exchange.
func (p *Provider) Resolve(ctx context.Context, hc *http.Client) error { return p.resolve(ctx, hc) }

// Values of Provider.AuthStyle.
const (
	AuthStyleBasic = "basic"
	AuthStylePost  = "post"
)

// maxDiscovery bounds an OpenID discovery document.
const maxDiscovery = 1 << 20

// resolve checks p, reads its secret and fills its endpoints from the
// issuer's discovery document when it names one.
func (p *Provider) resolve(ctx context.Context, hc *http.Client) error {
	if err := contract.CheckProviderName(p.Name); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if p.ClientID == "" {
		return fmt.Errorf("%w: provider %s: no client_id", ErrConfig, p.Name)
	}
	if p.Exchange != "" && p.Exchange != ExchangeTokenExchange && p.Exchange != ExchangeJWTBearer {
		return fmt.Errorf("%w: provider %s: exchange %q (want %s or %s)", ErrConfig, p.Name, p.Exchange, ExchangeTokenExchange, ExchangeJWTBearer)
	}
	if p.Exchange == ExchangeJWTBearer && p.AssertionKeyFile == "" {
		return fmt.Errorf("%w: provider %s: exchange %s needs assertion_key_file (the key the gateway signs its assertions with)", ErrConfig, p.Name, p.Exchange)
	}
	if p.AuthStyle != "" && p.AuthStyle != AuthStyleBasic && p.AuthStyle != AuthStylePost {
		return fmt.Errorf("%w: provider %s: auth_style %q (want basic or post)", ErrConfig, p.Name, p.AuthStyle)
	}
	if p.ClientSecretFile != "" {
		b, err := os.ReadFile(p.ClientSecretFile)
		if err != nil {
			return fmt.Errorf("%w: provider %s: client secret: %w", ErrConfig, p.Name, err)
		}
		p.secret = strings.TrimSpace(string(b))
	}
	if p.Issuer != "" && (p.TokenURL == "" || (p.Exchange == "" && (p.AuthorizationURL == "" || p.RevocationURL == ""))) {
		if err := p.discover(ctx, hc); err != nil {
			return fmt.Errorf("%w: provider %s: %w", ErrConfig, p.Name, err)
		}
	}
	for what, u := range map[string]string{"authorization_url": p.AuthorizationURL, "token_url": p.TokenURL, "revocation_url": p.RevocationURL} {
		if u == "" && (what == "revocation_url" || (what == "authorization_url" && p.Exchange != "")) {
			continue // an exchange provider has no browser flow
		}
		backChannel := p.HTTPBackChannel && what != "authorization_url"
		if !endpointURL(u, backChannel) {
			if backChannel {
				return fmt.Errorf("%w: provider %s: %s %q must be an http or https URL", ErrConfig, p.Name, what, u)
			}
			return fmt.Errorf("%w: provider %s: %s %q must be an https URL (http only on loopback, or with http_back_channel for the endpoints only the gateway calls)", ErrConfig, p.Name, what, u)
		}
	}
	return nil
}

// endpointURL reports whether u may be a provider endpoint: https, or http
// on loopback (on any host when httpAnywhere).
func endpointURL(u string, httpAnywhere bool) bool {
	pu, err := url.Parse(u)
	if err != nil || pu.Host == "" {
		return false
	}
	return pu.Scheme == "https" || (pu.Scheme == "http" && (httpAnywhere || loopback.Host(pu.Hostname())))
}

// discover reads the issuer's OpenID Connect discovery document (or, failing
// that, its RFC 8414 authorization server metadata).
func (p *Provider) discover(ctx context.Context, hc *http.Client) error {
	base := strings.TrimSuffix(p.Issuer, "/")
	var errs []error
	for _, path := range []string{"/.well-known/openid-configuration", "/.well-known/oauth-authorization-server"} {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		if err != nil {
			return err
		}
		resp, err := hc.Do(req)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", path, redactURLError(err)))
			continue
		}
		var doc struct {
			Issuer        string `json:"issuer"`
			Authorization string `json:"authorization_endpoint"`
			Token         string `json:"token_endpoint"`
			Revocation    string `json:"revocation_endpoint"`
		}
		err = json.NewDecoder(io.LimitReader(resp.Body, maxDiscovery)).Decode(&doc)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			errs = append(errs, fmt.Errorf("%s: status %d", path, resp.StatusCode))
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", path, err))
			continue
		}
		if strings.TrimSuffix(doc.Issuer, "/") != base {
			return fmt.Errorf("discovery names issuer %q, configured %q", doc.Issuer, p.Issuer)
		}
		p.AuthorizationURL = cmpOr(p.AuthorizationURL, doc.Authorization)
		p.TokenURL = cmpOr(p.TokenURL, doc.Token)
		p.RevocationURL = cmpOr(p.RevocationURL, doc.Revocation)
		return nil
	}
	return fmt.Errorf("issuer %s: no discovery document: %w", p.Issuer, errors.Join(errs...))
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// oauth returns the OAuth client configuration for scopes, redirecting to
// redirectURL.
func (p *Provider) oauth(redirectURL string, scopes []string) *oauth2.Config {
	style := oauth2.AuthStyleInHeader
	if p.AuthStyle == AuthStylePost {
		style = oauth2.AuthStyleInParams
	}
	return &oauth2.Config{
		ClientID:     p.ClientID,
		ClientSecret: p.secret,
		Endpoint:     oauth2.Endpoint{AuthURL: p.AuthorizationURL, TokenURL: p.TokenURL, AuthStyle: style},
		RedirectURL:  redirectURL,
		Scopes:       scopes,
	}
}
