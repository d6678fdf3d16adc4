package tool

import (
	"context"
	"errors"
	"fmt"
)

// CredentialKeyPrefix starts the metadata key of each delegated credential
// the gateway gives a call ([CredentialKey]).
const CredentialKeyPrefix = "toolfleet-credential-"

// CredentialKey is the metadata key of the access token for provider, e.g.
// "toolfleet-credential-github".
func CredentialKey(provider string) string { return CredentialKeyPrefix + provider }

// ErrNoCredential is returned by [Credential] when the call carries no token
// for the provider: the tool's contract does not name it
// (ToolOptions.credential), or the call did not come through a gateway.
var ErrNoCredential = errors.New("tool: the call carries no credential for this provider")

// Credential returns the access token the gateway gave this call for
// provider: a short-lived token of the calling principal's own account, with
// the scopes the tool's contract declares (ToolOptions.credential). Send it
// as "Authorization: Bearer TOKEN" to the provider's API; never log it,
// return it or keep it beyond the call.
//
//	tok, err := tool.Credential(ctx, "github")
//
// A principal who has not connected the provider never reaches the tool
// (the gateway asks it to connect first). Like [Principal], trust the value
// only when nothing but the gateway can reach the worker.
func Credential(ctx context.Context, provider string) (string, error) {
	if v := incoming(ctx, CredentialKey(provider)); v != "" {
		return v, nil
	}
	return "", fmt.Errorf("%w: %q", ErrNoCredential, provider)
}
