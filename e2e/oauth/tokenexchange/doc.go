// Package tokenexchange tests the gateway's RFC 8693 token-exchange client
// (services/gateway/exchange) against a real RFC 8693 implementation: the
// example OpenID Provider of github.com/zitadel/oidc/v3 (Ory Hydra, the
// other tests' server, has no token exchange). Both wire forms go through
// the library's token endpoint: the direct form (the caller's own token as
// subject_token) on the example storage, and the delegated form (an agent
// run's call through a gateway: a subject JWT the gateway signs, the
// delegate's token as actor_token) on a test IdP that adds to the example
// storage what an operator configures: trust in the gateway's assertion key
// and an act policy.
package tokenexchange
