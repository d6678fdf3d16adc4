package program

import (
	"context"
	"strings"

	"google.golang.org/grpc/metadata"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/orchestrator/agent"
)

// onBehalfOf makes calls made with ctx run as p: its subject and exactly the
// scopes recorded when the program started, never the orchestrator's own.
// It mirrors the agent runs' helper; when sdk/client gains OnBehalfOf (branch
// gw-idem) both become a call to it, which also covers the Connect transport.
func onBehalfOf(ctx context.Context, p Principal) context.Context {
	if p.Subject == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx,
		agent.MetadataOnBehalfOf, p.Subject,
		agent.MetadataOnBehalfScopes, strings.Join(p.Scopes, " "))
}

// withApproval marks req as approved by approver through DecideApproval.
// CallToolRequest.approval arrives with branch gw-idem; until then the grant is
// enforced by the workflow alone (a call that needs approval is never sent
// without one). At merge: req.Approval = &toolfleetv1.Approval{Approver: approver}.
func withApproval(req *toolfleetv1.CallToolRequest, approver string) *toolfleetv1.CallToolRequest {
	_ = approver
	return req
}
