package toolcall

import (
	"context"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/client"
)

// Principal is who started a run or a program: its tool calls run as this
// subject with exactly these scopes (delegated by the orchestrator, never as
// a superuser).
type Principal struct {
	Subject string   `json:"subject"`
	Scopes  []string `json:"scopes,omitempty"`
}

// OnBehalfOf makes calls made with ctx run as p: the subject and exactly the
// scopes recorded when the workflow started, never the orchestrator's own.
// The gateway honours it only when the orchestrator's identity holds
// tools:delegate (docs/gateway.md, "Delegation").
func OnBehalfOf(ctx context.Context, p Principal) context.Context {
	if p.Subject == "" {
		return ctx
	}
	return client.OnBehalfOf(ctx, p.Subject, p.Scopes)
}

// WithApproval marks req as approved by approver in a run's or a program's
// approval Update. The gateway accepts it because the orchestrator holds
// tools:approve, and records the approver on the call's events; a call that
// needs approval is never sent without one.
func WithApproval(req *toolfleetv1.CallToolRequest, approver string) *toolfleetv1.CallToolRequest {
	if approver != "" {
		req.Approval = &toolfleetv1.Approval{Approver: approver}
	}
	return req
}
