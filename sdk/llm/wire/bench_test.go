package wire

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	anthropicsdk "github.com/anthropics/anthropic-sdk-go"
	openaisdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"google.golang.org/genai"
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
