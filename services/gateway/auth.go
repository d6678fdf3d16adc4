package gateway

import (
	"github.com/toolfleet/toolfleet/services/gateway/auth"
)

// The gateway's authentication and authorization live in package auth; these
// names keep the gateway's API in one place for its callers.
type (
	// AuthConfig configures bearer-token authentication (see [auth.Config]).
	AuthConfig = auth.Config
	// Principal is an authenticated caller (see [auth.Principal]).
	Principal = auth.Principal
	// Credentials are what a request presents about its caller.
	Credentials = auth.Credentials
)

// Scopes, delegation metadata and the anonymous subject (see package auth).
const (
	ScopeCall            = auth.ScopeCall
	ScopeCallPrefix      = auth.ScopeCallPrefix
	ScopeApprove         = auth.ScopeApprove
	ScopeDelegate        = auth.ScopeDelegate
	HeaderOnBehalfOf     = auth.HeaderOnBehalfOf
	HeaderOnBehalfScopes = auth.HeaderOnBehalfScopes
	AnonymousSubject     = auth.AnonymousSubject
)

// authError renders a refusal of package auth as a pipeline error.
func authError(e *auth.Error) *CallError {
	if e == nil {
		return nil
	}
	return serverError(e.Code, e.Unwrap(), e.Developer, "%s", e.Message)
}
