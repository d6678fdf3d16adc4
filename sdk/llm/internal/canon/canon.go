// Package canon holds the helpers over the canonical conversation
// (toolfleet.v1 messages, tool calls, results and JSON Schemas) that the
// core (sdk/llm), the wire formats (sdk/llm/wire) and the text protocols
// (sdk/llm/dialect) share: tool-call arguments as exact JSON, a tool's
// input schema, a result's text. It imports no package of sdk/llm, so
// every layer can use it; what is public API is re-exported by the core.
package canon
