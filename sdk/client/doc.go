// Package client calls tools through a toolfleet gateway from Go.
//
// A [Client] speaks gRPC to the gateway by default ([WithConnect] switches to
// the Connect protocol over plain HTTP) and gives every call one of three
// outcomes, mirroring the gateway's failure table (docs/client.md):
//
//   - a server error, before the tool ran (unknown tool, auth, unavailable):
//     a *[ServerError] carrying the gRPC code;
//   - a validation error, the input broke the contract: a *[ValidationError]
//     with one message per offending field;
//   - an execution error, the tool ran and failed: a [Result] with Success
//     false and the tool's [toolfleetv1.ToolError]; [Result.Err] turns it into a
//     *[ExecutionError] for code that prefers Go errors.
//
// Retries follow each tool contract's retry policy (package sdk/retry: jittered
// exponential backoff): execution errors marked can_retry, and Unavailable server
// errors when a second delivery is safe. The client sends a call_id only where it
// buys something: the caller's own, or a generated one when it may retry a tool
// that is neither read-only nor idempotent. [OnBehalfOf] makes calls for another
// principal (delegation).
//
// [Client.ToolsFor] renders the served tools for a model provider (OpenAI,
// Anthropic, Gemini, … via sdk/llm), and [Client.HandleResponse] runs the tool
// calls of a provider response and returns the messages to send back.
//
// The runnable examples live in e2e, next to a real
// gateway: the layering rule (docs/architecture.md) keeps sdk/ packages, tests
// included, from importing the gateway.
package client
