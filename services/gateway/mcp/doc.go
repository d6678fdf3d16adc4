// Package mcp serves toolfleet's tools over the Model Context Protocol with the
// official Go SDK (github.com/modelcontextprotocol/go-sdk).
//
// A [Server] sits on a [Backend]: the gateway in process (mounted at /mcp on the
// gateway's port, streamable HTTP) or a remote gateway through sdk/client (the
// `toolfleet mcp` stdio bridge, see [ClientBackend]). Both run every call
// through the gateway's pipeline, so MCP clients see the same tools, auth,
// validation, idempotency and events as every other surface.
//
// # Revisions and state
//
// Both revisions are served: 2026-07-28 (server/discover, per-request _meta,
// Mcp-Method/Mcp-Name routing headers checked by the SDK, cache hints ttlMs
// and cacheScope on lists, input_required) and the handshake-era ones
// (2025-11-25 and older, initialize). Over HTTP ([Server.Handler]) the server
// is stateless: no session outlives a request, so any replica answers any
// request; 2025-11-25 clients get no Mcp-Session-Id and no GET stream (405).
// Over one transport ([Server.Serve], stdio) a session lives as long as the
// connection, at either revision.
//
// # Tools
//
// tools/list shows the latest served version of each tool under its model name
// ("Calculator_Add", valid for MCP and for every model provider), with the
// version in the title ("Calculator.Add@1.0.0", or "Every type
// (SchemaTest.Types@0.3.1)" when the contract has a title of its own) and in
// _meta["toolfleet/id"], ordered by name; a [Scoped] backend (the gateway)
// shows each caller only the tools it may call. A name calls exactly the
// version listed; when the registry serves a new version the list changes and
// subscribed clients (subscriptions/listen, or a stdio session) get
// notifications/tools/list_changed. The registry is polled
// (Options.PollInterval) while a request is open, and re-read before
// answering tools/list when older than Options.MaxStaleness. Pages hold
// Options.PageSize tools (cursor pagination). Annotations come from the
// contract hints; input and (object) output schemas are the contract's
// (JSON Schema 2020-12, passed through).
//
// # Calls and failures
//
// The three failure kinds of docs/gateway.md map as follows (see [failure]
// for the whole table):
//
//   - success: the value as JSON text plus structuredContent (objects);
//   - execution error: isError true with the tool's message (and its prompt hint);
//   - validation error: isError true with one line per field message, so a model
//     can correct itself;
//   - server error: the caller's own mistakes (unknown tool, conflict,
//     permission) are JSON-RPC -32602 with data.code; out of capacity is an
//     isError result with a retry hint; only the gateway's own failures
//     (unavailable, deadline, internal) are -32603.
//
// A tool that requires approval is approved through MCP itself: see
// [ApprovalInput] (input_required at 2026-07-28, elicitation/create over a
// stdio session at 2025-11-25), or with _meta["toolfleet/approver"].
//
// A call that asked for progress (a progressToken) gets a progress notification
// every Options.ProgressInterval while it runs; a cancelled request
// (notifications/cancelled, or a closed 2026-07-28 POST) cancels the call at
// the worker. An MCP client may pass an idempotency key as
// _meta["toolfleet/callId"], and a W3C traceparent in _meta joins the call to
// its trace.
//
// # Tasks
//
// A server given [Options.Tasks] (the gateway's is package orchestration,
// over the orchestrator's ProgramService and AgentService) runs MCP tasks: a
// task-augmented tools/call is answered with a task handle, and tasks/get,
// tasks/result, tasks/list, tasks/cancel (2025-11-25) and tasks/get,
// tasks/update, tasks/cancel (the 2026-07-28 extension
// io.modelcontextprotocol/tasks) are served from [Tasks] alone, so any
// replica answers for any task. Two built-in tools, [RunAgentTool] and
// [RunProgramTool], start agent runs and programs as tasks. See tasks.go and
// docs/mcp.md "Tasks".
package mcp
