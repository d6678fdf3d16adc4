// Package ratelimit enforces an operator's limits on tool calls per principal
// and per tool, across every gateway replica: calls per second (with a
// burst), calls at once, and bytes (request plus result) per window.
//
// # Rules
//
// A [Rule] names a principal (a subject, a glob such as "svc-*", or "*" for
// every principal, each with its own budget) and a tool pattern as the
// tools:call scopes spell them ("calculator.*", "search.Web", "*"), and any
// of the three limits. Rules with the same tool pattern form a group; in each
// group the first rule whose principal matches the caller applies, so a
// specific principal is listed before "*". A call must pass the applying rule
// of every group whose pattern matches its tool. The budget of a rule is kept
// per principal and shared by the tools its pattern matches.
//
// # Across replicas
//
// The shared state lives in one NATS KV bucket (toolfleet_limits), one key per
// (limit, rule, principal), changed with compare-and-set. A replica does not
// ask NATS on every call:
//
//   - rate: a replica leases a block of calls (20 ms worth of the rate, at
//     least 1, at most the burst) from the key's GCRA state and spends it
//     locally for up to a second; over any interval the fleet admits at most
//     rate × interval + burst + (replicas × (block − 1)) calls;
//   - concurrent: each replica writes the number of calls it has running under
//     its own id in the key, with an expiry it renews while they run; a dead
//     replica's calls stop counting once their lease expires (LeaseTTL). An
//     acquire asks NATS only when the replica holds no spare slot; a release
//     is written in the background within SyncInterval, during which the slot
//     stays taken (never over-admits). For limits of 16 and more, a busy
//     replica holds up to a sixteenth of the limit as spare slots, so the
//     fleet may refuse while up to replicas × limit/16 slots are idle;
//   - bytes: request and result bytes are added to a fixed window's counter
//     (aligned to the epoch) in the background every SyncInterval; a replica
//     re-reads the counter before a call when its copy is older than
//     SyncInterval. A call is admitted while the window is under the quota, so
//     the fleet may pass it by the calls in flight plus what the other replicas
//     admitted within one SyncInterval.
//
// The gateway's store shares (a byte window per store and principal) use a
// limiter of their own in the same bucket, its keys apart (Config.Scope);
// bytes known only after admission are counted with [Limiter.Charge].
//
// Every key the limiter tracks in memory is bounded (Config.MaxKeys, least
// recently used evicted first); keys in the bucket are bounded by its byte
// bound and max age.
//
// # When NATS is away
//
// Config.WhenNATSDown chooses: [Local] (the default) enforces every rule on
// each replica alone, so the fleet admits at most replicas × the limits;
// [Open] admits every call; [Closed] refuses every call a rule applies to
// (UNAVAILABLE, retryable).
package ratelimit
