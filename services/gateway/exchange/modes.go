package exchange

import (
	"context"
	"fmt"
	"net/url"
	"strings"
)

// tokenExchange is RFC 8693 at the operator's authorization server.
type tokenExchange struct {
	ep     endpoint
	signer *signer // nil: no delegated calls (no subject to present)
}

// Exchange presents the caller's own token as the subject; for a delegated
// call, a subject JWT the gateway signs (the principal presented no token to
// it) and the delegate's token as the actor.
func (x *tokenExchange) Exchange(ctx context.Context, req Request) (Token, error) {
	form := url.Values{
		"grant_type":           {GrantTokenExchange},
		"requested_token_type": {TokenTypeAccess},
		"audience":             {req.Audience},
	}
	if len(req.Scopes) > 0 {
		form.Set("scope", strings.Join(req.Scopes, " "))
	}
	switch {
	case req.Delegate == "" && req.SubjectToken != "":
		form.Set("subject_token", req.SubjectToken)
		form.Set("subject_token_type", TokenTypeAccess)
	case req.Delegate != "" && x.signer != nil && req.DelegateToken != "":
		subject, err := x.signer.sign(x.ep.now(), x.ep.clientID, req.Subject, []string{x.ep.tokenURL}, chain(x.ep.clientID, req.Delegate))
		if err != nil {
			return Token{}, fmt.Errorf("%w: %s: sign the subject token: %w", ErrUnavailable, x.ep.provider, err)
		}
		form.Set("subject_token", subject)
		form.Set("subject_token_type", TokenTypeJWT)
		form.Set("actor_token", req.DelegateToken)
		form.Set("actor_token_type", TokenTypeAccess)
	case req.Delegate != "" && req.DelegateToken != "":
		return Token{}, fmt.Errorf("%w: %s exchanges the caller's own token, and a delegated call (an agent run or program) has none: the operator sets assertion_key_file to act for their principals", ErrUnsupported, x.ep.provider)
	default:
		return Token{}, fmt.Errorf("%w: %s exchanges the caller's own token, and this call presented none", ErrUnsupported, x.ep.provider)
	}
	return x.ep.post(ctx, form, req.Scopes)
}

// jwtBearer is RFC 7523: the gateway asserts the principal and the chain.
type jwtBearer struct {
	ep     endpoint
	signer *signer
}

// Exchange sends an assertion for the principal whose aud names the token
// endpoint and the tool's audience (servers such as Ory Hydra grant the
// assertion's other audiences), with the act chain for the server's token
// hook to copy.
func (x *jwtBearer) Exchange(ctx context.Context, req Request) (Token, error) {
	assertion, err := x.signer.sign(x.ep.now(), x.ep.clientID, req.Subject, []string{x.ep.tokenURL, req.Audience}, chain(x.ep.clientID, req.Delegate))
	if err != nil {
		return Token{}, fmt.Errorf("%w: %s: sign the assertion: %w", ErrUnavailable, x.ep.provider, err)
	}
	form := url.Values{"grant_type": {GrantJWTBearer}, "assertion": {assertion}, "audience": {req.Audience}}
	if len(req.Scopes) > 0 {
		form.Set("scope", strings.Join(req.Scopes, " "))
	}
	return x.ep.post(ctx, form, req.Scopes)
}
