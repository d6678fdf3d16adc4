package llm

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	anthropicsdk "github.com/anthropics/anthropic-sdk-go"
	openaisdk "github.com/openai/openai-go/v3"
)

// BenchmarkParseVsSDK parses each documented response fixture into the
// canonical message and, as the baseline measured in the same run, decodes
// the same body into the official SDK's response type. It reports
// parse-ns/sdk-ns as "ratio" (below 1 means faster than the SDK decode).
func BenchmarkParseVsSDK(b *testing.B) {
	cases := []struct {
		name   string
		format Format
		sdk    func([]byte) error
	}{
		{"openai", OpenAIChat{}, func(body []byte) error {
			var v openaisdk.ChatCompletion
			return json.Unmarshal(body, &v)
		}},
		{"anthropic", Anthropic{}, func(body []byte) error {
			var v anthropicsdk.Message
			return json.Unmarshal(body, &v)
		}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			body, err := os.ReadFile(filepath.Join("testdata", c.name, "documented_response.json"))
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
				if err := c.sdk(body); err != nil {
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
