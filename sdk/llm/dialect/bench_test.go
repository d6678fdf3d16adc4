package dialect

import (
	"strings"
	"testing"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/internal/convtest"
)

// BenchmarkTextParsers measures each text protocol's parser in MB/s of
// model text: ~64 KiB of replies (reasoning where the dialect has a
// channel for it, prose and calls, each protocol's own rendering of the
// same calls) parsed whole, and streamed through the dialect scanner in
// 16-byte chunks (a typical token-sized delta).
func BenchmarkTextParsers(b *testing.B) {
	tools := []*toolfleetv1.ToolDefinition{convtest.TypedTool(b)}
	calls := []*toolfleetv1.ToolCall{
		llm.CallPart("call_1", "Weather_Forecast", map[string]any{"city": "San Francisco", "days": 3, "metric": true}).GetToolCall(),
		llm.CallPart("call_2", "Weather_Forecast", map[string]any{"city": "Oslo", "tags": []any{"a", "b"}}).GetToolCall(),
	}
	// The reasoning channels of the dialects that have one: a reply of a
	// thinking model opens with a few sentences of reasoning.
	reasoning := map[string][2]string{
		"harmony": {"<|channel|>analysis<|message|>", "<|end|>"},
		"qwen35":  {"<think>", "</think>"}, "glm47": {"<think>", "</think>"}, "deepseek_v4": {"<think>", "</think>"}, "deepseek_v41": {"<think>", "</think>"},
		"gemma4": {"<|channel>thought\n", "<channel|>"}, "kimi_k3": {k3ThinkOpen, k3ThinkClose}, "minimax_m3": {"<mm:think>", "</mm:think>"},
	}
	const thought = "The user wants the weather in two cities. I should call the forecast tool once per city, " +
		"in metric units for San Francisco, and tag the Oslo request so the answers can be told apart. " +
		"Then I will compare the two forecasts and answer in one short paragraph.\n"
	for _, p := range TextProtocols() {
		var reply strings.Builder
		if r, ok := reasoning[p.Name()]; ok {
			reply.WriteString(r[0] + thought + r[1])
		}
		reply.WriteString("Let me look that up for you; I will check both cities before answering.\n")
		for _, c := range calls {
			reply.WriteString(p.RenderCall(c) + "\n")
		}
		one := reply.String()
		var text strings.Builder
		for text.Len() < 64<<10 {
			text.WriteString(one)
		}
		body := text.String()
		if isSingleCall(p) {
			body = one // one call per turn: the rest is never read
		}
		b.Run(p.Name()+"/parse", func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, got, err := p.Parse(body, tools); err != nil || len(got) == 0 {
					b.Fatal(err, len(got))
				}
			}
		})
		d, ok := p.(Dialect)
		if !ok {
			continue
		}
		b.Run(p.Name()+"/stream16", func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, got, _, err := decodeChunks(d, body, 16, tools); err != nil || len(got) == 0 {
					b.Fatal(err, len(got))
				}
			}
		})
	}
}
