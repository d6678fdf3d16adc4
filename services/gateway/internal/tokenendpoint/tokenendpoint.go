// Package tokenendpoint sends one request to an OAuth 2.0 token endpoint
// (RFC 6749 §3.2) with the client's authentication and reads the JSON answer,
// bounded. The connections' refresh grant and the token exchange for
// first-party APIs both speak it; each keeps its own reading of the answer
// (which errors are the caller's, which a retry's).
package tokenendpoint

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

// maxAnswer bounds what is read of an answer.
const maxAnswer = 1 << 20

// ErrUnreadable: the endpoint answered something that is not a token
// response (the error carries the HTTP status only, never the body, which
// may quote the request).
var ErrUnreadable = errors.New("unreadable answer")

// Client is the gateway as an OAuth client of one token endpoint.
type Client struct {
	HTTP     *http.Client
	TokenURL string
	ClientID string
	Secret   string
	// PostAuth sends the credentials in the form (client_secret_post);
	// else HTTP Basic (client_secret_basic, RFC 6749 §2.3.1).
	PostAuth bool
}

// Answer is a token endpoint's answer: a token (Status 200, no Error) or an
// error code (RFC 6749 §5.2; its description is not kept).
type Answer struct {
	Status       int
	AccessToken  string
	TokenType    string
	RefreshToken string
	ExpiresIn    json.Number
	// Scope is a space-separated string as RFC 6749 says, or (some
	// providers) a JSON array: see [Answer.Scopes].
	Scope json.RawMessage
	Error string
}

// OK reports whether the answer issued a token.
func (a Answer) OK() bool { return a.Status == http.StatusOK && a.Error == "" }

// Scopes are the granted scopes the answer names (nil: it names none, which
// RFC 6749 §5.1 reads as those asked for).
func (a Answer) Scopes() []string {
	var s string
	if json.Unmarshal(a.Scope, &s) == nil {
		return strings.Fields(s)
	}
	var list []string
	if json.Unmarshal(a.Scope, &list) == nil {
		return list
	}
	return nil
}

// Expiry is when the access token expires, from expires_in counted from now;
// zero when the answer gives no positive lifetime.
func (a Answer) Expiry(now time.Time) time.Time {
	if n, err := a.ExpiresIn.Int64(); err == nil && n > 0 {
		return now.Add(time.Duration(n) * time.Second)
	}
	return time.Time{}
}

// Post sends form (the grant and its parameters) with the client's
// authentication. A transport failure is its cause without the URL; an
// answer that is not JSON is
// [ErrUnreadable]. An error answer is not an error here: see [Answer.OK].
func (c Client) Post(ctx context.Context, form url.Values) (Answer, error) {
	if c.PostAuth {
		form.Set("client_id", c.ClientID)
		if c.Secret != "" {
			form.Set("client_secret", c.Secret)
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.TokenURL, strings.NewReader(form.Encode()))
	if err != nil {
		return Answer{}, errors.New("malformed token request")
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	if !c.PostAuth {
		req.SetBasicAuth(url.QueryEscape(c.ClientID), url.QueryEscape(c.Secret))
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		// The cause without the URL: errors reach logs and callers, and the
		// provider's name says which endpoint it was.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return Answer{}, fmt.Errorf("post to the token endpoint: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	var body struct {
		AccessToken  string          `json:"access_token"`
		TokenType    string          `json:"token_type"`
		ExpiresIn    json.Number     `json:"expires_in"`
		RefreshToken string          `json:"refresh_token"`
		Scope        json.RawMessage `json:"scope"`
		Error        string          `json:"error"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxAnswer)).Decode(&body); err != nil {
		return Answer{Status: resp.StatusCode}, fmt.Errorf("%w (status %d)", ErrUnreadable, resp.StatusCode)
	}
	return Answer{Status: resp.StatusCode, AccessToken: body.AccessToken, TokenType: body.TokenType,
		RefreshToken: body.RefreshToken, ExpiresIn: body.ExpiresIn, Scope: body.Scope, Error: body.Error}, nil
}
