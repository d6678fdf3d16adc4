// Package wire holds the native tool-calling formats of the model providers,
// translated to and from toolfleet's canonical conversation
// (toolfleet.v1.Message) as pure functions, with no network:
//
//   - each provider's request and response JSON both ways, a [Format]:
//     OpenAI Chat Completions ([OpenAIChat]), OpenAI Responses
//     ([OpenAIResponses]), Anthropic Messages ([Anthropic]), Gemini
//     ([Gemini]) and Bedrock Converse ([Bedrock]); [Formats] and
//     [FormatByName] list them, [ConvertTools] turns one tools array into
//     another;
//   - their streams: a [StreamDecoder] per format turns events into
//     llm.Delta values for an llm.Assembler; [DecodeStream] reads
//     server-sent events ([ReadSSE]) and [DecodeEventStream] Bedrock's
//     binary event stream ([ReadEventStream]);
//   - MCP tools/list and tools/call JSON ([MCPTool], [MCPToolsList],
//     [MCPCallResult] and their parsers);
//   - per-provider schema transforms ([OpenAIStrictSchema],
//     [AnthropicSchema], [GeminiSchema]) over plain map[string]any JSON
//     Schemas;
//   - provider tool features kept through the canonical form: Anthropic
//     tool search (defer_loading, tool_reference results, server blocks),
//     input_examples and programmatic callers; OpenAI custom tools with
//     Lark or regex grammars and their free-text calls (ToolCall.input);
//     Gemini thought signatures per call; each degrades to what another
//     format can say (docs/formats.md, "Provider tool features").
//
// The package imports the sdk/llm core (messages, deltas, the error
// vocabulary) and its internal helpers, never the clients or the text
// protocols; the core never imports it (docs/architecture.md, "sdk/llm in
// layers"). The clients in sdk/llm/openai, anthropic and gemini use it to
// read their SDKs' JSON.
package wire
