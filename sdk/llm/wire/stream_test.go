package wire

import (
	"bufio"
	"bytes"
	"strings"
	"testing"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/internal/convtest"
)

// TestStreamTranscripts replays SSE transcripts written in each provider's
// documented stream format and checks the deltas and the assembled turn.
func TestStreamTranscripts(t *testing.T) {
	t.Parallel()
	addMul := []string{`Calculator_Add(%s)={"a":2,"b":3}`, `Calculator_Mul(%s)={"a":4,"b":5}`}
	withIDs := func(ids ...string) []string {
		out := make([]string, len(ids))
		for i, id := range ids {
			out[i] = strings.Replace(addMul[i], "%s", id, 1)
		}
		return out
	}
	tests := []struct {
		file       string
		format     Format
		wantDeltas []string // text deltas in order
		wantText   string
		wantCalls  []string
		wantUsage  *toolfleetv1.Usage
		wantThink  string
	}{
		{"openai/stream_parallel.sse", OpenAIChat{}, []string{"Computing ", "both."}, "Computing both.", withIDs("call_a", "call_b"), &toolfleetv1.Usage{InputTokens: 50, OutputTokens: 30, CacheReadTokens: 8}, ""},
		{"openai/stream_noindex.sse", OpenAIChat{}, nil, "", []string{`Calculator_Add(call_x)={"a":1,"b":2}`, `Calculator_Mul(call_y)={"a":3,"b":4}`}, nil, ""},
		{"openai-responses/stream_parallel.sse", OpenAIResponses{}, []string{"Computing ", "both."}, "Computing both.", withIDs("call_a", "call_b"), &toolfleetv1.Usage{InputTokens: 50, OutputTokens: 30, CacheReadTokens: 8}, ""},
		{"openai-responses/stream_nofinal.sse", OpenAIResponses{}, []string{"Computing ", "both."}, "Computing both.", withIDs("call_a", "call_b"), nil, ""},
		{"anthropic/stream_parallel.sse", Anthropic{}, []string{"Computing ", "both."}, "Computing both.", []string{`Calculator_Add(toolu_a)={"a":2,"b":3}`, `Clock_Now(toolu_b)={}`}, &toolfleetv1.Usage{InputTokens: 50, OutputTokens: 30, CacheReadTokens: 8}, "Two sums."},
		{"gemini/stream_parallel.sse", Gemini{}, []string{"Computing ", "both."}, "Computing both.", withIDs("Calculator_Add_1", "Calculator_Mul_2"), &toolfleetv1.Usage{InputTokens: 50, OutputTokens: 30}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			var deltas []string
			msg, err := DecodeStream(t.Context(), tt.format, bytes.NewReader(convtest.ReadTestdata(t, tt.file)), func(d llm.Delta) error {
				if d.Text != "" {
					deltas = append(deltas, d.Text)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			checkStreamed(t, msg, deltas, tt.wantDeltas, tt.wantText, tt.wantCalls, tt.wantUsage, tt.wantThink)
		})
	}
}

func checkStreamed(t *testing.T, msg *toolfleetv1.Message, deltas, wantDeltas []string, wantText string, wantCalls []string, wantUsage *toolfleetv1.Usage, wantThink string) {
	t.Helper()
	if !equalStrings(deltas, wantDeltas) {
		t.Errorf("text deltas = %q, want %q", deltas, wantDeltas)
	}
	if got := llm.MessageText(msg); got != wantText {
		t.Errorf("text = %q, want %q", got, wantText)
	}
	if got := convtest.CallStrings(llm.ToolCalls(msg)); !equalStrings(got, wantCalls) {
		t.Errorf("calls = %q, want %q", got, wantCalls)
	}
	if msg.GetStopReason() != llm.StopToolCalls {
		t.Errorf("stop = %q", msg.GetStopReason())
	}
	if wantUsage != nil && (msg.GetUsage().GetInputTokens() != wantUsage.InputTokens || msg.GetUsage().GetOutputTokens() != wantUsage.OutputTokens || msg.GetUsage().GetCacheReadTokens() != wantUsage.CacheReadTokens) {
		t.Errorf("usage = %v, want %v", msg.GetUsage(), wantUsage)
	}
	var think string
	for _, p := range msg.GetParts() {
		think += p.GetThinking().GetText()
	}
	if think != wantThink {
		t.Errorf("thinking = %q, want %q", think, wantThink)
	}
}

func TestBedrockStream(t *testing.T) {
	t.Parallel()
	dec := Bedrock{}.NewStreamDecoder()
	var deltas []string
	sc := bufio.NewScanner(bytes.NewReader(convtest.ReadTestdata(t, "bedrock/stream_parallel.jsonl")))
	for sc.Scan() {
		ds, err := dec.Decode("", sc.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			if d.Text != "" {
				deltas = append(deltas, d.Text)
			}
		}
	}
	msg, err := dec.Message()
	if err != nil {
		t.Fatal(err)
	}
	checkStreamed(t, msg, deltas, []string{"Computing ", "both."}, "Computing both.",
		[]string{`Calculator_Add(tooluse_a)={"a":2,"b":3}`, `Calculator_Mul(tooluse_b)={"a":4,"b":5}`}, &toolfleetv1.Usage{InputTokens: 50, OutputTokens: 30}, "")
}

func TestReadSSE(t *testing.T) {
	t.Parallel()
	in := ": comment\nevent: a\ndata: line1\ndata: line2\n\ndata: x\r\n\r\ndata: tail"
	var got []string
	err := ReadSSE(t.Context(), strings.NewReader(in), func(event string, data []byte) error {
		got = append(got, event+"|"+string(data))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"a|line1\nline2", "|x", "|tail"}
	if !equalStrings(got, want) {
		t.Errorf("events = %q, want %q", got, want)
	}
}
