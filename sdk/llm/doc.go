// Package llm translates between toolfleet's canonical conversation
// (toolfleet.v1.Message: role + parts: text, tool call, tool result, thinking,
// usage) and every tool-calling dialect toolfleet speaks:
//
//   - the native provider formats, as pure functions both ways with no
//     network (OpenAI Chat Completions and Responses, Anthropic Messages,
//     Gemini, Bedrock Converse, MCP tools/list and tools/call), their stream
//     decoders and the per-provider schema transforms live in sub-package
//     wire; this package keeps what they produce and share;
//   - text protocols for models without native tool calls: only the
//     [TextProtocol] interface is here; the protocols (fenced, Hermes, XML
//     function blocks), the open-model dialects and the wrappers that use
//     them live in sub-package dialect;
//   - streaming: provider stream decoders feed an [Assembler] that joins
//     tool-call fragments by index and id;
//   - a [Model] interface; clients on the official SDKs live in the
//     sub-packages openai, anthropic and gemini, and sub-package models opens
//     any of them from a [Spec], whose key is a reference ("env:NAME",
//     "file:/path") read only when the model is opened;
//   - guarantees every Model keeps: one tool call per turn when the request
//     asks for it ([KeepFirstCall], [FirstCallDeltas]), arguments with the
//     model's exact numbers ([ExactNumber]), provider errors classified as
//     retryable or permanent on every path ([APIError], [Retryable]).
//
// Tools are always shown to models under ToolDefinition.model_name (e.g.
// "Calculator_Add"); [Names] maps such names back to definitions.
//
// # Where things are
//
//   - sdk/llm (this package): [Model], [Request], [Delta], [Assembler], the
//     errors, [WithRetry], [Spec], [Names], the exact arguments, the
//     one-call-per-turn guarantee and the [TextProtocol] interface.
//   - sdk/llm/wire: the provider formats (Format, OpenAIChat,
//     OpenAIResponses, Anthropic, Gemini, Bedrock, ConvertTools), their
//     stream decoders (StreamDecoder, DecodeStream, ReadSSE, the Bedrock
//     event stream), MCP JSON (MCPTool, MCPCallResult, …) and the schema
//     transforms (OpenAIStrictSchema, AnthropicSchema, GeminiSchema). It
//     imports this package, never the reverse.
//   - sdk/llm/dialect: the text protocols (Fenced, Hermes, XMLFunction), the
//     open-model dialects (Dialect, For, TextDecoder), TagFilter, ParseAuto,
//     and the Model wrappers WithTextProtocol and WithAutoFallback. It
//     imports this package, never the reverse.
//   - sdk/llm/llmtest: the deterministic scripted model (Scripted,
//     NewScripted, SayText, CallTools, WriteCalls) and script files
//     ("scripted:NAME.yaml": ParseScriptFile, OpenScriptFile). YAML is read
//     there, never here.
//   - sdk/llm/openai, sdk/llm/anthropic, sdk/llm/gemini: the clients.
//   - sdk/llm/models: Open, a client from a [Spec].
//   - The demo model ("scripted:demo", [DemoModelName]) knows toolfleet's
//     bundled tools, so it is not part of the SDK: the orchestrator opens it.
package llm
