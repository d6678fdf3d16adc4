package exchange

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/toolfleet/toolfleet/services/gateway/internal/tokenendpoint"
)

// maxTokenBytes bounds an issued token (the answer itself is bounded by
// tokenendpoint).
const maxTokenBytes = 16 << 10

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
	c := tokenendpoint.Client{HTTP: e.hc, TokenURL: e.tokenURL, ClientID: e.clientID, Secret: e.secret, PostAuth: e.postStyle}
	a, err := c.Post(ctx, form)
	if err != nil {
		// The exchange runs on its own deadline (Set), not the caller's: a
		// timeout is the server not answering.
		return Token{}, fmt.Errorf("%w: %s: %w", ErrUnavailable, e.provider, err)
	}
	if !a.OK() {
		oe := &oauthError{status: a.Status, code: a.Error}
		if refused(a.Status, a.Error) {
			return Token{}, fmt.Errorf("%w: %s: %w", ErrRefused, e.provider, oe)
		}
		return Token{}, fmt.Errorf("%w: %s: %w", ErrUnavailable, e.provider, oe)
	}
	if a.AccessToken == "" || len(a.AccessToken) > maxTokenBytes {
		return Token{}, fmt.Errorf("%w: %s: no access token, or one over %d bytes", ErrUnavailable, e.provider, maxTokenBytes)
	}
	if a.TokenType != "" && !strings.EqualFold(a.TokenType, "bearer") && !strings.EqualFold(a.TokenType, "N_A") {
		return Token{}, fmt.Errorf("%w: %s: token type %q is not a bearer token", ErrUnavailable, e.provider, a.TokenType)
	}
	t := Token{Value: a.AccessToken, Type: "Bearer", Scopes: asked, Expiry: a.Expiry(e.now())}
	if granted := a.Scopes(); len(granted) > 0 {
		t.Scopes = granted
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
