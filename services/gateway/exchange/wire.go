package exchange

import (
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

// Bounds of an authorization server's answer.
const (
	maxAnswer     = 1 << 20
	maxTokenBytes = 16 << 10
)

// endpoint is the gateway's client at an authorization server's token
// endpoint.
type endpoint struct {
	provider  string
	tokenURL  string
	clientID  string
	secret    string
	postStyle bool // client_secret_post, else client_secret_basic
	hc        *http.Client
	now       func() time.Time
}

// oauthError is a token endpoint's error answer (RFC 6749 §5.2); its
// description is not kept (it may quote the request).
type oauthError struct {
	status int
	code   string
}

func (e *oauthError) Error() string { return fmt.Sprintf("status %d, error %q", e.status, e.code) }

// post sends a token request and reads the issued token. Errors wrap
// [ErrRefused] or [ErrUnavailable] and carry no token or server text.
func (e *endpoint) post(ctx context.Context, form url.Values, asked []string) (Token, error) {
	if e.postStyle {
		form.Set("client_id", e.clientID)
		if e.secret != "" {
			form.Set("client_secret", e.secret)
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.tokenURL, strings.NewReader(form.Encode()))
	if err != nil {
		return Token{}, fmt.Errorf("%w: %s: malformed token request", ErrUnavailable, e.provider)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	if !e.postStyle {
		req.SetBasicAuth(url.QueryEscape(e.clientID), url.QueryEscape(e.secret))
	}
	resp, err := e.hc.Do(req)
	if err != nil {
		// The exchange runs on its own deadline (Set), not the caller's: a
		// timeout is the server not answering.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL is the operator's, but keep errors short and form-free
		}
		return Token{}, fmt.Errorf("%w: %s: %w", ErrUnavailable, e.provider, err)
	}
	defer func() { _ = resp.Body.Close() }()
	var body struct {
		AccessToken string      `json:"access_token"`
		TokenType   string      `json:"token_type"`
		ExpiresIn   json.Number `json:"expires_in"`
		Scope       string      `json:"scope"`
		Error       string      `json:"error"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxAnswer)).Decode(&body); err != nil {
		return Token{}, fmt.Errorf("%w: %s: status %d, unreadable answer", ErrUnavailable, e.provider, resp.StatusCode)
	}
	if resp.StatusCode != http.StatusOK || body.Error != "" {
		oe := &oauthError{status: resp.StatusCode, code: body.Error}
		if refused(resp.StatusCode, body.Error) {
			return Token{}, fmt.Errorf("%w: %s: %w", ErrRefused, e.provider, oe)
		}
		return Token{}, fmt.Errorf("%w: %s: %w", ErrUnavailable, e.provider, oe)
	}
	if body.AccessToken == "" || len(body.AccessToken) > maxTokenBytes {
		return Token{}, fmt.Errorf("%w: %s: no access token, or one over %d bytes", ErrUnavailable, e.provider, maxTokenBytes)
	}
	if body.TokenType != "" && !strings.EqualFold(body.TokenType, "bearer") && !strings.EqualFold(body.TokenType, "N_A") {
		return Token{}, fmt.Errorf("%w: %s: token type %q is not a bearer token", ErrUnavailable, e.provider, body.TokenType)
	}
	t := Token{Value: body.AccessToken, Type: "Bearer", Scopes: asked}
	if body.Scope != "" {
		t.Scopes = strings.Fields(body.Scope)
	}
	if n, err := body.ExpiresIn.Int64(); err == nil && n > 0 {
		t.Expiry = e.now().Add(time.Duration(n) * time.Second)
	}
	return t, nil
}

// refused tells a refusal of this exchange (the principal, the scopes or the
// audience) from a server or configuration fault, which a retry or the
// operator fixes.
func refused(status int, code string) bool {
	switch code {
	case "invalid_grant", "invalid_scope", "invalid_target", "invalid_request", "access_denied", "unauthorized_client", "unsupported_grant_type":
		return status >= 400 && status < 500
	}
	return false
}
