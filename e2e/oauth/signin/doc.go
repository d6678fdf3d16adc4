// Package signin tests the console's sign-in with OpenID Connect
// (docs/console.md) end to end: a real `toolfleet dev` built from this
// repository, configured against a real Ory Hydra (hydratest) both for the
// console's sign-in (authorization code with PKCE) and for the gateway's
// API auth (Hydra's JWKS, issuer and audience), driven through real HTTP
// redirects by Go http.Clients with cookie jars.
package signin
