package gateway

import (
	"context"
	"errors"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/services/gateway/connections"
)

// Delegated credentials (docs/credentials.md): a tool whose contract names
// one (ToolRequirements.credential) receives, for each call, an access token
// of the calling principal's connection to that provider, in the call's
// outgoing metadata and nowhere else. A principal without a usable connection
// is answered with a request to connect (ConnectionRequired), before anything
// runs.

// ErrConnectionRequired: the tool acts with the caller's account at a
// provider the caller has not connected (or not with the scopes it needs);
// code FailedPrecondition with a ConnectionRequired detail.
var ErrConnectionRequired = errors.New("gateway: connect the account the tool acts with first")

// ErrCredentialUnavailable: the tool's credential cannot be had: the gateway
// has no connections or no such provider (code Unimplemented: not the
// caller's to fix, and unlike FailedPrecondition never taken for a missing
// approval), or the connection store or the provider did not answer now
// (Unavailable, retryable).
var ErrCredentialUnavailable = errors.New("gateway: credential unavailable")

// TokenSource gives calls the tokens of their principals' connections
// (package connections). Nil: a tool that names a credential is refused.
type TokenSource interface {
	Token(ctx context.Context, subject string, cred *toolfleetv1.ToolCredential) (connections.Token, error)
}

// withCredential fetches the token def's contract names for p and puts it on
// ctx's outgoing metadata. It returns the audit record of the credential (nil
// for a tool that acts as itself).
func (g *Gateway) withCredential(ctx context.Context, p *Principal, def *toolfleetv1.ToolDefinition) (context.Context, *toolfleetv1.CallCredential, *CallError) {
	cred := def.GetRequirements().GetCredential()
	if cred == nil {
		return ctx, nil, nil
	}
	if g.cfg.Exchange != nil && g.cfg.Exchange.Provides(cred.GetProvider()) {
		return g.withExchanged(ctx, p, def, cred) // a first-party API (exchanged.go)
	}
	if g.cfg.Connections == nil {
		return ctx, nil, serverError(codes.Unimplemented, ErrCredentialUnavailable, "",
			"%s was not run: it acts with the caller's %s account, and this gateway has no connections configured (docs/credentials.md)",
			def.GetId(), cred.GetProvider())
	}
	subject := p.ID()
	if p.Transport().Anonymous {
		// With auth off nobody is authenticated, whatever a call says it acts
		// for: only the one local principal's connections are used (a store
		// kept from a run with auth on may hold others').
		subject = AnonymousSubject
	}
	tok, err := g.cfg.Connections.Token(ctx, subject, cred)
	var need *connections.ConnectError
	switch {
	case errors.As(err, &need):
		// The URL stays out of the message: messages reach logs and events, and
		// the URL is for the caller's human only (the ConnectionRequired detail).
		ce := serverError(codes.FailedPrecondition, ErrConnectionRequired, "",
			"%s was not run: it acts with your %s account, which is not connected (%s); open the authorization URL of this error's connection_required detail to connect it, then call again",
			def.GetId(), need.Provider, need.Reason)
		ce.Connection = &toolfleetv1.ConnectionRequired{Provider: need.Provider, Scopes: slices.Clone(need.Scopes),
			AuthorizationUrl: need.URL, Reason: need.Reason}
		return ctx, nil, ce
	case errors.Is(err, connections.ErrUnknownProvider):
		return ctx, nil, serverError(codes.Unimplemented, ErrCredentialUnavailable, "",
			"%s was not run: it acts with a %s account, and this gateway's operator configured no such provider", def.GetId(), cred.GetProvider())
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return ctx, nil, serverError(codes.DeadlineExceeded, ErrDeadline, "", "%s was not run: the call ended while its %s token was fetched", def.GetId(), cred.GetProvider())
	case err != nil:
		// The error names the provider and the store, never a token.
		ce := serverError(codes.Unavailable, ErrCredentialUnavailable, err.Error(),
			"%s was not run: its %s token could not be had now; try again", def.GetId(), cred.GetProvider())
		ce.RetryAfter = notLoadedRetryAfter
		return ctx, nil, ce
	}
	ctx = metadata.AppendToOutgoingContext(ctx, tool.CredentialKey(cred.GetProvider()), tok.Value)
	return ctx, &toolfleetv1.CallCredential{Provider: cred.GetProvider(), Scopes: tok.Scopes, ConnectionId: tok.ConnectionID,
		Audience: cred.GetAudience()}, nil
}
