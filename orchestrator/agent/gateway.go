package agent

import (
	"context"
	"strings"

	"google.golang.org/grpc/metadata"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// Delegation metadata agreed with the gateway (docs/agents.md): honoured only
// when the orchestrator's own identity holds the tools:delegate scope.
const (
	MetadataOnBehalfOf     = "toolfleet-on-behalf-of"
	MetadataOnBehalfScopes = "toolfleet-on-behalf-scopes"
)

// onBehalfOf makes calls made with ctx run as p: the subject and exactly the
// scopes recorded when the run started, never the orchestrator's own.
//
// This is the one place the delegation seam lives; once sdk/client exposes
// OnBehalfOf (branch gw-idem) this becomes `return client.OnBehalfOf(ctx,
// p.Subject, p.Scopes)`, which also covers the Connect transport.
func onBehalfOf(ctx context.Context, p Principal) context.Context {
	if p.Subject == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx,
		MetadataOnBehalfOf, p.Subject,
		MetadataOnBehalfScopes, strings.Join(p.Scopes, " "))
}

// withApproval marks req as approved by approver in this run's DecideApproval.
//
// The field (CallToolRequest.approval = Approval{approver}) is added by the
// gateway's branch gw-idem; until it is merged the grant is enforced by the
// workflow alone (a call that needs approval is never sent without one). At
// merge: `req.Approval = &toolfleetv1.Approval{Approver: approver}`.
func withApproval(req *toolfleetv1.CallToolRequest, approver string) *toolfleetv1.CallToolRequest {
	_ = approver
	return req
}
