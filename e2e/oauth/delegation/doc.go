// Package delegation holds the end-to-end tests of delegated credentials
// (docs/credentials.md) on a real Ory Hydra: a principal connects through the
// gateway's code + PKCE flow with real redirects, a tool acts with the
// principal's token against a resource API that accepts only tokens Hydra
// introspects as valid, two gateway replicas refresh once, revoke, expiry,
// a second tenant, key rotation, and no token in logs or events; agent runs
// and programs (embedded Temporal) that wait for a connection and resume
// with the same call id, with no token in their histories or transcripts.
package delegation
