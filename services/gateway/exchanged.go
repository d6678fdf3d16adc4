package gateway

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/services/gateway/exchange"
)

// Token exchange for first-party APIs (docs/credentials.md): a tool whose
// credential names one of the operator's exchange providers receives a
// token the operator's authorization server issued for the calling
// principal, bound to the tool's audience, with the delegation chain. The
// chain comes from authentication alone: a delegate is a caller holding
// tools:delegate, so a plain caller cannot pass for an agent run.

// Exchanger gives calls exchanged tokens (package exchange's Set).
type Exchanger interface {
	// Provides reports whether provider is an exchange provider.
	Provides(provider string) bool
	// Token returns a token for req from provider.
	Token(ctx context.Context, provider string, req exchange.Request) (exchange.Token, error)
}

// ErrExchangeRefused: the operator's authorization server refused a token
// for this caller and tool (code PermissionDenied).
var ErrExchangeRefused = errors.New("gateway: the authorization server refused a token for this call")

// withExchanged is withCredential for an exchange provider.
func (g *Gateway) withExchanged(ctx context.Context, p *Principal, def *toolfleetv1.ToolDefinition, cred *toolfleetv1.ToolCredential) (context.Context, *toolfleetv1.CallCredential, *CallError) {
	req := exchange.Request{Audience: cred.GetAudience(), Scopes: cred.GetScopes()}
	// With auth off nobody is authenticated, whatever a call says it acts
	// for: no subject, so nothing is exchanged.
	if !p.Anonymous && !p.Transport().Anonymous {
		req.Subject = p.ID()
		if p.Via != nil {
			req.Delegate, req.DelegateToken = p.Via.ID(), p.Via.Bearer()
		} else {
			req.SubjectToken = p.Bearer()
		}
	}
	tok, err := g.cfg.Exchange.Token(ctx, cred.GetProvider(), req)
	// Messages name the provider and the audience, never a token, the
	// server's text or its address; the Set logs the status and OAuth error.
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return ctx, nil, serverError(codes.DeadlineExceeded, ErrDeadline, "", "%s was not run: the call ended while its %s token was exchanged", def.GetId(), cred.GetProvider())
	case errors.Is(err, exchange.ErrRefused):
		return ctx, nil, serverError(codes.PermissionDenied, ErrExchangeRefused, "",
			"%s was not run: %s refused a token for you for the audience %q with the scopes the tool needs", def.GetId(), cred.GetProvider(), cred.GetAudience())
	case errors.Is(err, exchange.ErrUnsupported):
		return ctx, nil, serverError(codes.Unimplemented, ErrCredentialUnavailable, err.Error(), // configuration, no secrets
			"%s was not run: this gateway cannot obtain a %s token for this caller (docs/credentials.md)", def.GetId(), cred.GetProvider())
	case err != nil:
		ce := serverError(codes.Unavailable, ErrCredentialUnavailable, "",
			"%s was not run: its %s token could not be had now; try again", def.GetId(), cred.GetProvider())
		ce.RetryAfter = notLoadedRetryAfter
		return ctx, nil, ce
	}
	ctx = metadata.AppendToOutgoingContext(ctx, tool.CredentialKey(cred.GetProvider()), tok.Value)
	return ctx, &toolfleetv1.CallCredential{Provider: cred.GetProvider(), Scopes: tok.Scopes, Audience: cred.GetAudience()}, nil
}
