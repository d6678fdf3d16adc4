// Package connections keeps the delegated credentials of the gateway's
// principals: per (principal, provider) OAuth connections made with the
// authorization code flow and PKCE, their tokens sealed with AES-GCM under an
// operator's key ring and stored in a replicated JetStream KV bucket,
// refreshed before they expire by exactly one gateway replica at a time, and
// revoked on request.
//
// The gateway asks [Service.Token] for the access token a tool's contract
// names (ToolOptions.credential); a principal without a connection gets
// [*ConnectError] carrying the URL that starts one, which every surface turns
// into a request to connect rather than a failure. Tokens never leave this
// package except as that return value: records, errors and logs carry the
// provider, the scopes and the connection id, never a token.
//
// docs/credentials.md is the operator's guide.
package connections
