package client

import (
	"context"
	"strings"
)

// Delegation metadata, as the gateway reads it (docs/gateway.md, "Delegation").
const (
	// HeaderOnBehalfOf names the principal a delegated call is made for.
	HeaderOnBehalfOf = "toolfleet-on-behalf-of"
	// HeaderOnBehalfScopes lists that principal's scopes, space-separated.
	HeaderOnBehalfScopes = "toolfleet-on-behalf-scopes"
)

type delegationKey struct{}

type delegation struct {
	subject string
	scopes  string
}

// OnBehalfOf returns ctx such that calls made with it run as subject with
// exactly scopes (the gateway honours it only when the client's own token holds
// the tools:delegate scope, e.g. the orchestrator's service identity). Events of
// such calls name subject as the user and the client's own subject as "via".
func OnBehalfOf(ctx context.Context, subject string, scopes []string) context.Context {
	return context.WithValue(ctx, delegationKey{}, delegation{subject: subject, scopes: strings.Join(scopes, " ")})
}

func delegationOf(ctx context.Context) (delegation, bool) {
	d, ok := ctx.Value(delegationKey{}).(delegation)
	return d, ok
}
