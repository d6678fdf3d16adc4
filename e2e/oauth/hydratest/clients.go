package hydratest

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"golang.org/x/oauth2"
)

// Client is an OAuth 2.0 client registered at Hydra.
type Client struct {
	ID     string
	Secret string // "" for a public client
	// RedirectURI is the first registered redirect URI ("" for a machine client).
	RedirectURI string
	Scopes      []string
	Audience    []string
	// Issuer is the Hydra the client is registered at.
	Issuer string
	server *Server
}

// ClientSpec describes a client to register (Hydra's admin API fields).
type ClientSpec struct {
	// ID is the client id; "" lets Hydra choose one.
	ID string
	// Secret is a confidential client's secret; "" lets Hydra generate one.
	Secret string
	// Public clients authenticate with nothing but PKCE
	// (token_endpoint_auth_method "none"); the others with a secret
	// (client_secret_basic) that Hydra generates.
	Public bool
	// GrantTypes default to authorization_code and refresh_token.
	GrantTypes []string
	// RedirectURIs are the registered callbacks.
	RedirectURIs []string
	// Scopes are the scopes the client may ask for ("openid", "offline_access", …).
	Scopes []string
	// Audience are the audiences the client may ask access tokens for.
	Audience []string
}

// CreateClient registers spec at Hydra.
func (s *Server) CreateClient(ctx context.Context, spec ClientSpec) (Client, error) {
	grants := spec.GrantTypes
	if len(grants) == 0 {
		grants = []string{"authorization_code", "refresh_token"}
	}
	auth := "client_secret_basic"
	if spec.Public {
		auth = "none"
	}
	body := map[string]any{
		"grant_types":                grants,
		"response_types":             []string{"code"},
		"redirect_uris":              nonNil(spec.RedirectURIs),
		"scope":                      strings.Join(spec.Scopes, " "),
		"audience":                   nonNil(spec.Audience),
		"token_endpoint_auth_method": auth,
	}
	if spec.ID != "" {
		body["client_id"] = spec.ID
	}
	if spec.Secret != "" && !spec.Public {
		body["client_secret"] = spec.Secret
	}
	var out struct {
		ClientID     string `json:"client_id"`
		ClientSecret string `json:"client_secret"`
	}
	if err := s.adminJSON(ctx, http.MethodPost, "/admin/clients", body, &out); err != nil {
		return Client{}, err
	}
	if spec.Public {
		out.ClientSecret = ""
	} else if out.ClientSecret == "" {
		out.ClientSecret = spec.Secret
	}
	c := Client{ID: out.ClientID, Secret: out.ClientSecret, Scopes: spec.Scopes, Audience: spec.Audience, Issuer: s.Issuer, server: s}
	if len(spec.RedirectURIs) > 0 {
		c.RedirectURI = spec.RedirectURIs[0]
	}
	return c, nil
}

// PublicClient registers a public client (authorization code with PKCE and
// refresh tokens, no secret) or fails t.
func (s *Server) PublicClient(t testing.TB, redirectURI string, scopes []string, audience ...string) Client {
	t.Helper()
	return s.mustClient(t, ClientSpec{Public: true, RedirectURIs: []string{redirectURI}, Scopes: scopes, Audience: audience})
}

// ConfidentialClient registers a client with a secret (authorization code,
// refresh tokens) or fails t.
func (s *Server) ConfidentialClient(t testing.TB, redirectURI string, scopes []string, audience ...string) Client {
	t.Helper()
	return s.mustClient(t, ClientSpec{RedirectURIs: []string{redirectURI}, Scopes: scopes, Audience: audience})
}

// MachineClient registers a client_credentials client (a service acting as
// itself) or fails t.
func (s *Server) MachineClient(t testing.TB, scopes []string, audience ...string) Client {
	t.Helper()
	return s.mustClient(t, ClientSpec{GrantTypes: []string{"client_credentials"}, Scopes: scopes, Audience: audience})
}

func (s *Server) mustClient(t testing.TB, spec ClientSpec) Client {
	t.Helper()
	c, err := s.CreateClient(t.Context(), spec)
	if err != nil {
		t.Fatalf("hydratest: create client: %v", err)
	}
	return c
}

// Config is the client as a golang.org/x/oauth2 configuration (scopes: all
// the client may ask for). Public clients send their id in the body.
func (c Client) Config() *oauth2.Config {
	style := oauth2.AuthStyleInHeader
	if c.Secret == "" {
		style = oauth2.AuthStyleInParams
	}
	return &oauth2.Config{
		ClientID: c.ID, ClientSecret: c.Secret, RedirectURL: c.RedirectURI, Scopes: c.Scopes,
		Endpoint: oauth2.Endpoint{AuthURL: c.server.AuthURL(), TokenURL: c.server.TokenURL(), AuthStyle: style},
	}
}

// Revoke revokes an access or refresh token of c (RFC 7009). Revoking a
// refresh token also revokes the access tokens issued with it.
func (c Client) Revoke(ctx context.Context, token string) error {
	form := url.Values{"token": {token}}
	if c.Secret == "" {
		form.Set("client_id", c.ID)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.server.RevokeURL(), strings.NewReader(form.Encode()))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if c.Secret != "" {
		req.SetBasicAuth(url.QueryEscape(c.ID), url.QueryEscape(c.Secret))
	}
	return c.server.do(req, nil)
}
