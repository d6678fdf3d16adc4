// Package agent runs durable agent loops on Temporal: AgentRunWorkflow drives
// model turn → tool calls → tool results → next turn until the model answers,
// a budget is spent, or the run is cancelled, and survives any crash of the
// process that runs it.
//
// The transcript never travels through Temporal history. Messages live in a
// NATS JetStream KV bucket, one key per message ("<run_id>.<seq>"), written
// with create-only semantics at a position the workflow chose, so a retried
// activity finds its own earlier write instead of appending twice. Large tool
// results go to an Object Store (content-addressed within their run) and the
// transcript keeps a preview. Activities take and return references (run id,
// positions) and small summaries (160-byte previews, or with
// HistoryContentNone only digests and sizes); history grows with the number
// of steps, not the size of the conversation.
//
// The transcript, the blobs, the run records and the reaper are the run
// store's (package runstore), which programs share. Nothing is kept for
// ever: every run has a retention timer in the run records bucket, and the
// runstore.Reaper frees a run's transcript, blobs and events once it has
// been closed for the retention. The same bucket counts what each
// principal's runs hold; [Runs] refuses a start over the runstore.Quota
// before storing anything (runstore.QuotaError).
//
// Files follow Temporal's sample layout: shared.go (names and the types that
// cross the workflow boundary), workflow.go (deterministic loop, no I/O),
// activities.go (ModelTurn, CallTool and friends, methods on [Activities]),
// events.go (run events and token deltas on NATS), runs.go (starting and
// steering runs from a Temporal client), codemode.go (run_program: programs
// as child workflows).
package agent
