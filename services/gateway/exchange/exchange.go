package exchange

import (
	"context"
	"errors"
	"log/slog"
	"time"
)

// Errors; match them with errors.Is. Their messages name the provider, the
// HTTP status and the OAuth error code, never a token or the server's text.
var (
	// ErrRefused: the authorization server refused the exchange for this
	// principal (invalid_grant, invalid_scope, invalid_target, …).
	ErrRefused = errors.New("exchange: refused by the authorization server")
	// ErrUnavailable: the authorization server did not answer usefully now
	// (network, 5xx, an unreadable answer, the gateway's client refused).
	ErrUnavailable = errors.New("exchange: authorization server unavailable")
	// ErrUnsupported: the configuration cannot act for this caller (a
	// delegated call to a token-exchange provider without an assertion key,
	// a caller without a token of its own).
	ErrUnsupported = errors.New("exchange: cannot act for this caller")
	// ErrUnknownProvider: no exchange provider of that name.
	ErrUnknownProvider = errors.New("exchange: unknown provider")
)

// Grant types and token types of the wire forms.
const (
	GrantTokenExchange = "urn:ietf:params:oauth:grant-type:token-exchange"
	GrantJWTBearer     = "urn:ietf:params:oauth:grant-type:jwt-bearer"
	TokenTypeAccess    = "urn:ietf:params:oauth:token-type:access_token"
	TokenTypeJWT       = "urn:ietf:params:oauth:token-type:jwt"
)

// Request is one call's need: a token for Subject bound to Audience with
// Scopes. The gateway fills it from the authenticated call, never from what
// a caller claims: Delegate is set only for callers holding tools:delegate.
type Request struct {
	// Subject is the principal acted for.
	Subject string
	// SubjectToken is Subject's own bearer token when it called directly
	// ("" for a delegated call). A secret.
	SubjectToken string
	// Delegate is the authenticated caller acting for Subject (the
	// orchestrator running an agent run or program); "" for a direct call.
	Delegate string
	// DelegateToken is the delegate's bearer token. A secret.
	DelegateToken string
	// Audience is the tool's audience (ToolCredential.audience).
	Audience string
	// Scopes are the tool's scopes.
	Scopes []string
}

// Actor is one link of a delegation chain (RFC 8693 §4.1): Sub acts, for
// the subject or for the actor nested in Act.
type Actor struct {
	Sub string `json:"sub"`
	Act *Actor `json:"act,omitempty"`
}

// chain is the act claim the gateway asserts: the gateway (its client id at
// the authorization server) acts, for the delegate when there is one.
func chain(clientID, delegate string) *Actor {
	a := &Actor{Sub: clientID}
	if delegate != "" {
		a.Act = &Actor{Sub: delegate}
	}
	return a
}

// Token is an exchanged access token for one call's worker.
type Token struct {
	// Value is the token (a secret: never log it).
	Value string
	// Type is its type, usually "Bearer".
	Type string
	// Expiry is when it expires (zero: the server did not say).
	Expiry time.Time
	// Scopes are its scopes (the server's answer, else those asked for).
	Scopes []string
}

// String never shows the token.
func (t Token) String() string { return "exchange.Token(" + t.Type + ")" }

// GoString never shows the token either (%#v).
func (t Token) GoString() string { return t.String() }

// LogValue keeps the token out of structured logs.
func (t Token) LogValue() slog.Value { return slog.StringValue(t.String()) }

// Exchanger obtains a token for a request at one authorization server.
type Exchanger interface {
	Exchange(ctx context.Context, req Request) (Token, error)
}
