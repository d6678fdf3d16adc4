// Package toolcall is what a Temporal workflow needs to call a gateway tool
// durably. Agent runs (package agent) and Starlark programs (package program)
// both build on it and never on each other's internals:
//
//   - [Tool]: the summary of a tool's contract that travels in history, and
//     [Options]: the call activity's timeouts and retries derived from it,
//     with one documented default for tools whose contract sets none;
//   - [Gate]: the approval gate (calls waiting for a decision, the validated
//     Update that decides them, the wait with its timeout);
//   - [Principal], [OnBehalfOf] and [WithApproval]: calls run as the subject
//     that started the workflow, with exactly its recorded scopes;
//   - [Heartbeat]: activities that wait on the gateway heartbeat, so a dead
//     worker's attempt is retried within the heartbeat timeout;
//   - [Event] and the run event subjects on NATS;
//   - [Classify]: the one reading of a gateway outcome (ok, validation,
//     execution, refused, retry, config) that both engines render;
//   - [Resolve]: the one rule by which runs and programs get their tools
//     (exact ids, globs, a search query; a bound refused, never cut).
//
// The Connect plumbing the two services share (auth, recovery, the
// late-bound handler) is in the subpackage apibase.
package toolcall
