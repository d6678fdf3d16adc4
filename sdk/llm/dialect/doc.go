// Package dialect is how toolfleet talks tools with models that have no
// native tool calls, or that write calls as text anyway: each way is an
// llm.TextProtocol.
//
//   - The prompt protocols toolfleet teaches in the system prompt:
//     [Fenced], [Hermes] and [XMLFunction], each with a system-prompt
//     augmenter ([Augment], [ForTextProtocol]) and a parser.
//   - The wire shapes open-weight models write in raw text, each a [Dialect]
//     (Qwen3-Coder, gpt-oss harmony, Mistral, Llama 3 JSON and pythonic,
//     Kimi K2, GLM-4.5, MiniMax-M2, DeepSeek-V3.1 and V3.2, and the 2026
//     families: Qwen3.5, GLM-4.7, Gemma 4, Llama 4, DeepSeek V4 and V4.1,
//     Kimi K3, MiniMax-M3) on one streaming scanner, [TextDecoder], and
//     [For] to pick one from a model name. Reasoning channels become
//     thinking; a reply whose prompt opened the channel (llm.Request's
//     ThinkingOpen) is read from inside it ([TextDecoder.StartInThinking]).
//   - [TextProtocols] and [TextProtocolByName] list them by the names a
//     run's tool_protocol uses ("fenced", "hermes", "xml", "qwen3_coder", …).
//   - [ParseAuto] finds calls in the text of a model with native calls, and
//     [TagFilter] holds back a half-received block while streaming.
//   - The llm.Model wrappers: [WithTextProtocol] teaches a protocol and
//     parses replies with it; [WithAutoFallback] parses text-protocol
//     blocks out of a native model's reply (tool_protocol "auto").
//
// The package imports the sdk/llm core and its internal helpers, never the
// provider clients; the core never imports it (docs/architecture.md,
// "sdk/llm in layers").
package dialect
