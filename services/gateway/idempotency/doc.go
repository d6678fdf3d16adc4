// Package idempotency makes a caller-given call_id an idempotency key across
// gateway replicas, with one NATS KV bucket that is also the call journal
// (package sdk/tool/journal): whether a call ran is read from records, never
// guessed from a timeout.
//
// A key is scoped to the caller and the tool ([Key]: principal subject, tool name
// without version, call_id), so two principals that pick the same call_id never
// see each other's results, and a run's deterministic call_id never collides with
// another principal's. Every entry carries a SHA-256 digest of the canonical input
// ([DigestOf]): the same key with other input is [ErrConflict] and runs nothing.
//
// [Store.Acquire] creates the entry as the gateway's lock, or answers from it:
// a finished response (Claim.Stored), a worker's recorded answer
// (Claim.Finished), or, for a call in flight, a wait that lasts as long as the
// entry's holder shows signs of life (a worker rewrites its started record,
// a gateway renews its lock while the call is on a worker without a journal).
// A holder gone leaves either a lock no worker started (taken over: the call
// runs) or a start (it may have run: [ErrOutcomeUnknown], recorded for every
// later retry). The gateway hands the lock's revision to the worker
// ([Claim.Journal]); after a lost answer [Claim.Fence] proves the attempt
// never started (and never will) or finds its start ([Claim.Await]).
//
// The bucket is bounded (Config.MaxBytes, Config.MaxValueSize); when full it
// refuses new entries ([ErrFull]) rather than forget a finished call, whose
// retry would then run again. A response over the value limit is replaced by
// a tombstone: a repeat gets [ErrResultTooLarge] instead of a second run. So
// that one principal cannot fill the bucket for every other, Config.Share
// bounds what each principal's entries take: over it, a new key of that
// principal is [ErrOverShare], while its existing keys are still answered.
//
// When NATS cannot answer, [Store.Acquire] returns [ErrUnavailable]; the gateway
// then decides whether the call may run unprotected (read-only and idempotent
// tools) or is refused (every other tool).
package idempotency
