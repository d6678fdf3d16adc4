// Package tokenexchange tests the gateway's RFC 8693 token-exchange client
// (services/gateway/exchange) against a real RFC 8693 implementation: the
// example OpenID Provider of github.com/zitadel/oidc/v3 (Ory Hydra, the
// other tests' server, has no token exchange).
package tokenexchange
