// Package llmtest holds the test doubles of sdk/llm: [Scripted], a
// deterministic [llm.Model] that plays [ScriptTurn]s ([SayText],
// [CallTools], [WriteCalls]), and script files, the same model written as
// YAML for agent runs without a key ("scripted:NAME.yaml": [ParseScriptFile],
// [OpenScriptFile]). It is its own package so that the YAML reader and the
// test doubles stay out of the core every SDK user imports; [StreamReply]
// streams any finished reply the way a provider would, for other fakes.
package llmtest
