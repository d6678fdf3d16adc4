package llm

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	anthropicsdk "github.com/anthropics/anthropic-sdk-go"
	openaisdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"google.golang.org/genai"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// sdkDecoders decode a response body into the official SDK's response type
// of a format (the formats whose SDK is a dependency).
var sdkDecoders = map[string]func([]byte) error{
	"openai": func(body []byte) error {
		var v openaisdk.ChatCompletion
		return json.Unmarshal(body, &v)
	},
	"openai-responses": func(body []byte) error {
		var v responses.Response
		return json.Unmarshal(body, &v)
	},
	"anthropic": func(body []byte) error {
		var v anthropicsdk.Message
		return json.Unmarshal(body, &v)
	},
	"gemini": func(body []byte) error {
		var v genai.GenerateContentResponse
		return json.Unmarshal(body, &v)
	},
}

// BenchmarkParseVsSDK parses response fixtures (each format's documented
// response, and the provider tool features: custom tool calls, tool
// search, parallel calls with thought signatures) into the canonical
// message and, as the baseline measured in the same run, decodes the same
// body into the official SDK's response type. It reports parse-ns/sdk-ns as
// "ratio" (below 1 means faster than the SDK decode).
func BenchmarkParseVsSDK(b *testing.B) {
	cases := []struct {
		name   string
		format Format
		file   string
	}{
		{"openai", OpenAIChat{}, "documented_response.json"},
		{"openai/custom_tool", OpenAIChat{}, "custom_tool_response.json"},
		{"openai-responses/custom_tool", OpenAIResponses{}, "custom_tool_response.json"},
		{"openai-responses/tool_search", OpenAIResponses{}, "tool_search_response.json"},
		{"anthropic", Anthropic{}, "documented_response.json"},
		{"anthropic/tool_search", Anthropic{}, "tool_search_response.json"},
		{"gemini/parallel_signatures", Gemini{}, "parallel_signatures_response.json"},
	}
	for _, c := range cases {
		decode := sdkDecoders[c.format.Name()]
		b.Run(c.name, func(b *testing.B) {
			body, err := os.ReadFile(filepath.Join("testdata", c.format.Name(), c.file))
			if err != nil {
				b.Fatal(err)
			}
			// Both decodes run in every iteration and are timed apart, so the
			// ratio compares them under the same conditions in the same run.
			var ours, sdk time.Duration
			for b.Loop() {
				start := time.Now()
				if _, err := c.format.ParseResponse(body); err != nil {
					b.Fatal(err)
				}
				mid := time.Now()
				if err := decode(body); err != nil {
					b.Fatal(err)
				}
				ours += mid.Sub(start)
				sdk += time.Since(mid)
			}
			ratio := float64(ours) / float64(sdk)
			b.ReportMetric(ratio, "ratio")
			b.ReportMetric(float64(ours.Nanoseconds())/float64(b.N), "parse-ns/op")
			b.ReportMetric(float64(sdk.Nanoseconds())/float64(b.N), "sdk-ns/op")
		})
	}
}

// BenchmarkReadEventStream unframes a Bedrock ConverseStream body (the
// parallel-calls transcript repeated to ~1,000 frames) with AWS's
// event-stream decoder and reports throughput and allocations per frame.
func BenchmarkReadEventStream(b *testing.B) {
	one := bedrockEventStream(b)
	var body []byte
	for len(body) < 100<<10 {
		body = append(body, one...)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	frames := 0
	for b.Loop() {
		frames = 0
		err := ReadEventStream(b.Context(), bytes.NewReader(body), func(string, []byte) error { frames++; return nil })
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(frames), "frames/op")
}

// BenchmarkTextParsers measures each text protocol's parser in MB/s of
// model text: ~64 KiB of replies (prose and calls, each protocol's own
// rendering of the same calls) parsed whole, and streamed through the
// dialect scanner in 16-byte chunks (a typical token-sized delta).
func BenchmarkTextParsers(b *testing.B) {
	tools := []*toolfleetv1.ToolDefinition{typedTool(b)}
	calls := []*toolfleetv1.ToolCall{
		CallPart("call_1", "Weather_Forecast", map[string]any{"city": "San Francisco", "days": 3, "metric": true}).GetToolCall(),
		CallPart("call_2", "Weather_Forecast", map[string]any{"city": "Oslo", "tags": []any{"a", "b"}}).GetToolCall(),
	}
	for _, p := range TextProtocols() {
		var reply strings.Builder
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
