// Package registry is the gateway's view of the fleet: which worker replicas
// are reachable and which tool versions they serve.
//
// Workers join two ways: static addresses from configuration
// ([Registry.KeepStatic]) and heartbeats on NATS ([Registry.WatchAnnouncements],
// which also expires replicas whose announcements stop). A replica that
// announces DRAINING or NOT_SERVING is leaving: [Route.Pick] skips it, and its
// tools stay known until its lease runs out, so that callers get a retryable
// Unavailable rather than NotFound while no other replica serves them. Each new replica is
// dialed and its contracts are loaded by gRPC server reflection; a replica that
// serves a Toolkit@version with another contract than the one already
// registered is refused (the trust rule, trust.go). Workers are dialed in plain
// text, or with TLS or mTLS as a [TLSConfig] says (tls.go).
//
// The registry knows what it does not know yet (warm.go): for a warm-up bound
// after it starts watching (and after each [Registry.Rediscover] at a NATS
// reconnect), and while an announced worker naming a toolkit is not loaded,
// [Snapshot.Resolve] answers a tool id that does not resolve with a retryable
// Unavailable instead of NotFound; [Registry.Warm] is closed once the first
// warm-up has ended (the gateway's readiness waits for it).
//
// Every change publishes a new immutable [Snapshot]. Callers take
// [Registry.Current] once per request and [Snapshot.Resolve] a tool reference
// to a [Route], whose [Route.Pick] orders the replicas to try.
package registry
