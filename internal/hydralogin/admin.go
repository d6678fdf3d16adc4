package hydralogin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// maxAdminAnswer bounds what is read of one admin API answer.
const maxAdminAnswer = 1 << 20

// Admin calls Hydra's admin API for login, consent and logout requests.
type Admin struct {
	base string
	hc   *http.Client
}

// NewAdmin returns a client of the admin API at base (e.g.
// http://127.0.0.1:4445). hc nil: a client with a 30 s timeout.
func NewAdmin(base string, hc *http.Client) (*Admin, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("hydra admin URL %q: want http(s)://host:port", base)
	}
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	return &Admin{base: strings.TrimRight(base, "/"), hc: hc}, nil
}

// LoginRequest is the part of Hydra's login request the apps read.
type LoginRequest struct {
	// Skip: Hydra already knows who this is (a remembered session); the
	// login must be accepted for Subject without asking.
	Skip    bool   `json:"skip"`
	Subject string `json:"subject"`
	Client  Client `json:"client"`
	// RequestedScope is what the client asks for (shown on the page).
	RequestedScope []string `json:"requested_scope"`
	OIDCContext    struct {
		LoginHint string `json:"login_hint"`
	} `json:"oidc_context"`
}

// Client names the OAuth client a request comes from.
type Client struct {
	ID   string `json:"client_id"`
	Name string `json:"client_name"`
}

// Label is the client's name, or its id when it has none.
func (c Client) Label() string {
	if c.Name != "" {
		return c.Name
	}
	return c.ID
}

// ConsentRequest is the part of Hydra's consent request the apps read.
type ConsentRequest struct {
	Skip              bool     `json:"skip"`
	Subject           string   `json:"subject"`
	Client            Client   `json:"client"`
	RequestedScope    []string `json:"requested_scope"`
	RequestedAudience []string `json:"requested_access_token_audience"`
}

// Grant is what a consent accepts.
type Grant struct {
	Scopes    []string
	Audiences []string
	// IDToken holds extra ID token claims (e.g. email); nil for none.
	IDToken map[string]any
}

// redirect is every accept/reject answer: where the browser goes next.
type redirect struct {
	RedirectTo string `json:"redirect_to"`
}

// LoginRequest reads the login request of challenge.
func (a *Admin) LoginRequest(ctx context.Context, challenge string) (LoginRequest, error) {
	var lr LoginRequest
	err := a.call(ctx, http.MethodGet, "/admin/oauth2/auth/requests/login", "login_challenge", challenge, nil, &lr)
	return lr, err
}

// AcceptLogin signs subject in for challenge and returns where the browser
// goes next.
func (a *Admin) AcceptLogin(ctx context.Context, challenge, subject string) (string, error) {
	var r redirect
	err := a.call(ctx, http.MethodPut, "/admin/oauth2/auth/requests/login/accept", "login_challenge", challenge,
		map[string]any{"subject": subject, "remember": false}, &r)
	return r.RedirectTo, err
}

// RejectLogin ends the login of challenge with an OAuth error (e.g.
// access_denied) and description.
func (a *Admin) RejectLogin(ctx context.Context, challenge, code, description string) (string, error) {
	var r redirect
	err := a.call(ctx, http.MethodPut, "/admin/oauth2/auth/requests/login/reject", "login_challenge", challenge,
		map[string]any{"error": code, "error_description": description}, &r)
	return r.RedirectTo, err
}

// ConsentRequest reads the consent request of challenge.
func (a *Admin) ConsentRequest(ctx context.Context, challenge string) (ConsentRequest, error) {
	var cr ConsentRequest
	err := a.call(ctx, http.MethodGet, "/admin/oauth2/auth/requests/consent", "consent_challenge", challenge, nil, &cr)
	return cr, err
}

// AcceptConsent grants g for challenge.
func (a *Admin) AcceptConsent(ctx context.Context, challenge string, g Grant) (string, error) {
	idToken := g.IDToken
	if idToken == nil {
		idToken = map[string]any{}
	}
	var r redirect
	err := a.call(ctx, http.MethodPut, "/admin/oauth2/auth/requests/consent/accept", "consent_challenge", challenge,
		map[string]any{
			"grant_scope":                 nonNil(g.Scopes),
			"grant_access_token_audience": nonNil(g.Audiences),
			"remember":                    false,
			"session":                     map[string]any{"id_token": idToken},
		}, &r)
	return r.RedirectTo, err
}

// RejectConsent ends the consent of challenge with an OAuth error.
func (a *Admin) RejectConsent(ctx context.Context, challenge, code, description string) (string, error) {
	var r redirect
	err := a.call(ctx, http.MethodPut, "/admin/oauth2/auth/requests/consent/reject", "consent_challenge", challenge,
		map[string]any{"error": code, "error_description": description}, &r)
	return r.RedirectTo, err
}

// AcceptLogout accepts the logout of challenge.
func (a *Admin) AcceptLogout(ctx context.Context, challenge string) (string, error) {
	var r redirect
	err := a.call(ctx, http.MethodPut, "/admin/oauth2/auth/requests/logout/accept", "logout_challenge", challenge, nil, &r)
	return r.RedirectTo, err
}

// ErrNoChallenge: the page was opened without the challenge Hydra adds to
// the URL (not through Hydra).
var ErrNoChallenge = errors.New("no challenge in the URL")

// AdminError is an answer of the admin API other than 2xx.
type AdminError struct {
	Status int
	// Body is Hydra's answer, cut to 512 bytes.
	Body string
}

func (e *AdminError) Error() string {
	return fmt.Sprintf("hydra admin API answered %d: %s", e.Status, e.Body)
}

// call sends method path?param=challenge with body (JSON) and decodes a 2xx
// answer into out.
func (a *Admin) call(ctx context.Context, method, path, param, challenge string, body, out any) error {
	if challenge == "" {
		return fmt.Errorf("%w: %s", ErrNoChallenge, param)
	}
	return a.do(ctx, method, path, "?"+param+"="+url.QueryEscape(challenge), body, out)
}

// do sends method path+query with body (JSON; none when nil) and decodes a
// 2xx answer into out (when not nil).
func (a *Admin) do(ctx context.Context, method, path, query string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("hydra %s: %w", path, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+path+query, rd)
	if err != nil {
		return fmt.Errorf("hydra %s: %w", path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		return fmt.Errorf("hydra %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAdminAnswer))
	if err != nil {
		return fmt.Errorf("hydra %s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		return &AdminError{Status: resp.StatusCode, Body: clip(string(b))}
	}
	if out == nil || len(b) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("hydra %s %s: decode the answer: %w", method, path, err)
	}
	return nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
