// Package exchange gives tools of first-party APIs a token of the calling
// principal bound to the tool's audience, issued by the operator's own
// authorization server (docs/credentials.md, "First-party APIs"), with the
// delegation chain in an act claim (RFC 8693 §4.1).
//
// Two wire forms, one per configured provider (connections.Provider.Exchange):
//
//   - token-exchange (RFC 8693): the caller's own bearer token is the
//     subject_token; for a call an agent run or program makes for a
//     principal, the subject is a JWT the gateway signs and the delegate's
//     token is the actor_token.
//   - jwt-bearer (RFC 7523): the gateway signs an assertion (iss its client
//     id, sub the principal, aud the token endpoint and the tool's audience,
//     act the chain); for servers without RFC 8693, such as Ory Hydra, whose
//     token hook copies act into the token.
//
// [Set] holds the exchangers of a gateway and a bounded cache of the tokens
// they obtained, per (provider, principal, delegate, audience, scopes),
// used until shortly before they expire. Tokens never reach logs or errors.
package exchange
