package auth

import (
	"fmt"
	"path"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// Scopes a caller's token carries.
const (
	// ScopeCall allows calling every tool (besides the tools' own required scopes).
	ScopeCall = "tools:call"
	// ScopeCallPrefix starts toolkit patterns such as "tools:call:calculator.*".
	ScopeCallPrefix = "tools:call:"
	// ScopeApprove allows approving a call of a tool whose contract requires
	// approval, by naming the approver in the request (CallToolRequest.approval).
	ScopeApprove = "tools:approve"
	// ScopeDelegate allows calling on behalf of another principal (the
	// orchestrator's own identity holds it), with [HeaderOnBehalfOf].
	ScopeDelegate = "tools:delegate"
)

// Delegation metadata (gRPC metadata or HTTP headers, the same on every surface):
// honoured only when the authenticated caller holds [ScopeDelegate].
const (
	// HeaderOnBehalfOf names the subject the call is made for.
	HeaderOnBehalfOf = "toolfleet-on-behalf-of"
	// HeaderOnBehalfScopes lists that subject's scopes, space-separated.
	HeaderOnBehalfScopes = "toolfleet-on-behalf-scopes"
)

// AnonymousSubject is the subject of the fixed principal used when auth is off.
const AnonymousSubject = "anonymous"

// Principal is an authenticated caller, or the principal a delegate calls for.
type Principal struct {
	Subject string
	Scopes  []string
	// Anonymous is true when authentication is disabled: the principal counts as
	// holding every scope.
	Anonymous bool
	// Via is the authenticated delegate when the call is made on behalf of
	// Subject (see [HeaderOnBehalfOf]); nil for a direct call.
	Via *Principal

	// bearer is the token the principal authenticated with (nil for a
	// delegated principal and with auth off). A pointer, so that printing a
	// Principal (%v, %+v) shows an address, never the token.
	bearer *bearerToken
}

type bearerToken struct{ value string }

// Bearer is the bearer token p authenticated with: "" for the principal a
// delegate calls for (it presented none; its delegate did) and with auth
// off. Token exchange (package exchange) presents it to the operator's
// authorization server; nothing else may log, store or forward it.
func (p *Principal) Bearer() string {
	if p == nil || p.bearer == nil {
		return ""
	}
	return p.bearer.value
}

// AnonymousPrincipal is the fixed principal of a gateway with auth off (read-only).
var AnonymousPrincipal = &Principal{Subject: AnonymousSubject, Anonymous: true}

// ID is the principal's subject, [AnonymousSubject] for an anonymous principal
// without one. Idempotency keys and events use it.
func (p *Principal) ID() string {
	if p.Subject == "" && p.Anonymous {
		return AnonymousSubject
	}
	return p.Subject
}

// Has reports whether p holds scope (an anonymous principal holds every scope).
func (p *Principal) Has(scope string) bool {
	if p.Anonymous {
		return true
	}
	for _, s := range p.Scopes {
		if s == scope {
			return true
		}
	}
	return false
}

// Transport is the principal that authenticated the call: the delegate of a
// delegated call, else p itself.
func (p *Principal) Transport() *Principal {
	if p.Via != nil {
		return p.Via
	}
	return p
}

// Authorize checks that p may call def: tools:call or a matching toolkit
// pattern, plus every scope the tool's contract requires.
func (p *Principal) Authorize(def *toolfleetv1.ToolDefinition) *Error {
	if p.Anonymous {
		return nil
	}
	name := def.GetToolkit() + "." + def.GetName()
	allowed := false
	have := map[string]bool{}
	for _, s := range p.Scopes {
		have[s] = true
		if s == ScopeCall {
			allowed = true
		} else if pat, ok := strings.CutPrefix(s, ScopeCallPrefix); ok {
			if m, _ := path.Match(strings.ToLower(pat), strings.ToLower(name)); m {
				allowed = true
			}
		}
	}
	if !allowed {
		return refuse(codes.PermissionDenied, ErrPermissionDenied, "",
			"the token has neither %s nor %s%s", ScopeCall, ScopeCallPrefix, strings.ToLower(def.GetToolkit())+".*")
	}
	for _, s := range def.GetRequirements().GetScopes() {
		if !have[s] {
			return refuse(codes.PermissionDenied, ErrPermissionDenied, "", "%s requires the scope %q", def.GetId(), s)
		}
	}
	return nil
}

// MayList reports whether listings (ListTools, SearchTools, OXP GET /tools,
// MCP tools/list) show def to p: the tools [Principal.Authorize] lets p call.
// A caller holding [ScopeDelegate] calling for itself sees every tool: it
// calls on behalf of others, whose scopes decide each call.
func (p *Principal) MayList(def *toolfleetv1.ToolDefinition) bool {
	if p.Via == nil && p.Has(ScopeDelegate) {
		return true
	}
	return p.Authorize(def) == nil
}

// Approve checks a call of a tool whose contract requires approval: the
// request names an approver and the caller that presented it (for a delegated
// call, the delegate) holds [ScopeApprove]. It returns the approval to record,
// with its time filled in; nil for a tool that needs none.
func (p *Principal) Approve(def *toolfleetv1.ToolDefinition, a *toolfleetv1.Approval) (*toolfleetv1.Approval, *Error) {
	if !def.GetRequirements().GetRequiresApproval() {
		return nil, nil
	}
	how := fmt.Sprintf("a caller holding the %s scope names the approver in the request (approval.approver), "+
		"or an agent run calls it after a human approved the call", ScopeApprove)
	switch {
	case a.GetApprover() == "":
		return nil, refuse(codes.FailedPrecondition, ErrApprovalRequired, "",
			"%s requires an approval before it runs: %s", def.GetId(), how)
	case !p.Transport().Has(ScopeApprove):
		return nil, refuse(codes.FailedPrecondition, ErrApprovalRequired, "",
			"%s requires an approval, and this caller may not give one: %s", def.GetId(), how)
	}
	out := &toolfleetv1.Approval{Approver: a.GetApprover(), ApprovedAt: a.GetApprovedAt()}
	if out.ApprovedAt == nil {
		out.ApprovedAt = timestamppb.Now()
	}
	return out, nil
}
