// Package auth is the gateway's answer to "who is calling, and may they?":
//
//   - [Authenticator] verifies bearer JWTs (HS256 secret, or RS256/ES256 keys
//     from a JWKS file or URL, fetched and rotated by
//     github.com/MicahParks/keyfunc: refetched on an unknown kid, removed keys
//     dropped) and applies delegation ([HeaderOnBehalfOf]);
//   - [Principal.Authorize] checks the call scopes and a tool contract's own
//     required scopes;
//   - [Principal.Approve] enforces requires_approval: an approval is present
//     and the caller that presented it holds [ScopeApprove].
//
// Failures are *[Error] values carrying a gRPC code and a caller-facing
// message; the gateway renders them on every surface.
package auth
