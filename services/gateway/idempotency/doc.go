// Package idempotency makes a caller-given call_id an idempotency key across
// gateway replicas, with one NATS KV bucket.
//
// A key is scoped to the caller and the tool ([Key]: principal subject, tool name
// without version, call_id), so two principals that pick the same call_id never
// see each other's results, and a run's deterministic call_id never collides with
// another principal's. Every entry carries a SHA-256 digest of the canonical input
// ([DigestOf]): the same key with other input is [ErrConflict] and runs nothing.
//
// An entry is one of three records (see record.go):
//
//   - a lock, held by the replica running the call, with a per-key TTL so that a
//     crashed replica's lock expires;
//   - the finished response, kept for the bucket's TTL;
//   - a tombstone saying the call finished but its response was over the bucket's
//     value limit: a repeat gets [ErrResultTooLarge] instead of a second run.
//
// The bucket is bounded (Config.MaxBytes, Config.MaxValueSize); when it is full
// the oldest entries are dropped first, so a full bucket never stops calls.
//
// When NATS cannot answer, [Store.Acquire] returns [ErrUnavailable]; the gateway
// then decides whether the call may run unprotected (read-only and idempotent
// tools) or is refused (every other tool).
package idempotency
