// Package mcp serves toolfleet's tools over the Model Context Protocol with the
// official Go SDK (github.com/modelcontextprotocol/go-sdk).
//
// A [Server] sits on a [Backend]: the gateway in process (mounted at /mcp on the
// gateway's port, streamable HTTP) or a remote gateway through sdk/client (the
// `toolfleet mcp` stdio bridge, see [ClientBackend]). Both run every call
// through the gateway's pipeline, so MCP clients see the same tools, auth,
// validation, idempotency and events as every other surface.
//
// # Tools
//
// tools/list shows the latest served version of each tool under its model name
// ("Calculator_Add", valid for MCP and for every model provider), with the
// version in the title ("Calculator.Add@1.0.0", or "Every type
// (SchemaTest.Types@0.3.1)" when the contract has a title of its own) and in
// _meta["toolfleet/id"]. A name calls exactly the version listed; when the
// registry serves a new version the list changes and clients that asked for
// notifications get notifications/tools/list_changed. The registry is polled
// (Options.PollInterval) while at least one client is connected, and
// re-read before answering tools/list when older than Options.MaxStaleness.
// Pages hold Options.PageSize tools (cursor pagination). Annotations come from
// the contract hints; input and (object) output schemas are the contract's.
//
// # Calls and failures
//
// The three failure kinds of ARCHITECTURE.md §4 map as follows:
//
//   - success: the value as JSON text plus structuredContent (objects);
//   - execution error: isError true with the tool's message (and its prompt hint);
//   - validation error: isError true with one line per field message, so a model
//     can correct itself;
//   - server error (unknown tool or version, auth, unavailable, deadline): a
//     JSON-RPC error; malformed arguments are a JSON-RPC invalid-params error.
//
// A call that asked for progress (a progressToken) gets a progress notification
// every Options.ProgressInterval while it runs; a cancelled request
// (notifications/cancelled) cancels the call at the worker. An MCP client may
// pass an idempotency key as _meta["toolfleet/callId"].
package mcp
