// Package devstack runs toolfleet's infrastructure in one process: an embedded NATS
// server with JetStream and an embedded Temporal server on SQLite (plus, optionally,
// the Temporal Web UI). `toolfleet dev` and every integration test stand on it.
//
// The Temporal server is tuned for latency (see LatencyTunedDynamicConfig): stock dev
// settings put tens of milliseconds of queue polling on every workflow step.
//
// Data lives under Config.DataDir (JetStream store and temporal.db); a stack started
// again on the same folder keeps its streams, KV buckets and workflows. With an empty
// DataDir everything is temporary, which is what tests want.
//
// Layering: only cmd/ and tests may import devstack; sdk/ never does, because it pulls
// in the whole Temporal server.
package devstack
