// Package natsx holds toolfleet's NATS plumbing that is not public API: an embedded
// NATS server with JetStream for `toolfleet dev` and integration tests, and helpers
// shared by the services that publish and consume on NATS: RequireAuth makes the
// embedded server require a credential, ConnOptions names sdk/natsconn.Options.
package natsx
