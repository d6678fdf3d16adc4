package contract

import (
	"fmt"
	"regexp"
	"slices"

	"google.golang.org/protobuf/proto"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// Bounds of a credential declaration: a contract is read from any worker that
// announces itself, so nothing in it is unbounded.
const (
	// MaxCredentialScopes is the most scopes one tool may declare.
	MaxCredentialScopes = 32
	// MaxScopeLength is the longest scope, in bytes.
	MaxScopeLength = 256
	// MaxAudienceLength is the longest audience, in bytes.
	MaxAudienceLength = 512
)

var (
	providerNameRe = regexp.MustCompile(`^[a-z0-9_-]{1,64}$`)
	// RFC 6749 §3.3: scope-token = 1*( %x21 / %x23-5B / %x5D-7E ).
	scopeTokenRe = regexp.MustCompile(`^[\x21\x23-\x5b\x5d-\x7e]+$`)
)

// CheckProviderName fails with ErrInvalidContract unless name can name a
// credential provider: 1 to 64 characters of [a-z0-9_-].
func CheckProviderName(name string) error {
	if !providerNameRe.MatchString(name) {
		return fmt.Errorf("%w: credential provider %q must match %s", ErrInvalidContract, name, providerNameRe)
	}
	return nil
}

// credentialOf validates a tool's credential option and returns the copy its
// definition carries: scopes sorted and deduplicated, so two contracts that
// say the same thing have the same definition. Nil when the tool declares none.
func credentialOf(c *toolfleetv1.ToolCredential) (*toolfleetv1.ToolCredential, error) {
	if c == nil {
		return nil, nil
	}
	if err := CheckProviderName(c.GetProvider()); err != nil {
		return nil, err
	}
	if n := len(c.GetScopes()); n > MaxCredentialScopes {
		return nil, fmt.Errorf("%w: credential declares %d scopes, at most %d", ErrInvalidContract, n, MaxCredentialScopes)
	}
	for _, s := range c.GetScopes() {
		if len(s) > MaxScopeLength || !scopeTokenRe.MatchString(s) {
			return nil, fmt.Errorf("%w: credential scope %q is not an OAuth scope token (RFC 6749 §3.3, at most %d bytes)", ErrInvalidContract, s, MaxScopeLength)
		}
	}
	if len(c.GetAudience()) > MaxAudienceLength {
		return nil, fmt.Errorf("%w: credential audience longer than %d bytes", ErrInvalidContract, MaxAudienceLength)
	}
	out := proto.CloneOf(c)
	slices.Sort(out.Scopes)
	out.Scopes = slices.Compact(out.Scopes)
	return out, nil
}

// ScopesWidened returns the scopes of now that before did not grant, and
// whether the provider or audience changed (a different account altogether).
// A tool version whose credential widens asks its callers for more than they
// consented to: ship a new version instead (scripts/breaking.sh checks it).
func ScopesWidened(before, now *toolfleetv1.ToolCredential) (added []string, otherAccount bool) {
	if now == nil {
		return nil, false
	}
	if before == nil {
		return slices.Clone(now.GetScopes()), true
	}
	if before.GetProvider() != now.GetProvider() || before.GetAudience() != now.GetAudience() {
		return slices.Clone(now.GetScopes()), true
	}
	for _, s := range now.GetScopes() {
		if !slices.Contains(before.GetScopes(), s) {
			added = append(added, s)
		}
	}
	return added, false
}
