package llm

import (
	"bufio"
	"bytes"
	"errors"
	"strings"
	"testing"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
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
			msg, err := DecodeStream(t.Context(), tt.format, bytes.NewReader(readTestdata(t, tt.file)), func(d Delta) error {
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
	if got := MessageText(msg); got != wantText {
		t.Errorf("text = %q, want %q", got, wantText)
	}
	if got := callStrings(ToolCalls(msg)); !equalStrings(got, wantCalls) {
		t.Errorf("calls = %q, want %q", got, wantCalls)
	}
	if msg.GetStopReason() != StopToolCalls {
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
	sc := bufio.NewScanner(bytes.NewReader(readTestdata(t, "bedrock/stream_parallel.jsonl")))
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

// TestAssembler covers the keying rules directly.
func TestAssembler(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		deltas  []ToolCallDelta
		want    []string
		wantErr error
	}{
		{"interleaved by index", []ToolCallDelta{{Index: 0, ID: "a", Name: "F"}, {Index: 1, ID: "b", Name: "G"}, {Index: 1, Arguments: `{"y":`}, {Index: 0, Arguments: `{"x":1}`}, {Index: 1, Arguments: `2}`}},
			[]string{`F(a)={"x":1}`, `G(b)={"y":2}`}, nil},
		{"index reused with new id", []ToolCallDelta{{Index: 0, ID: "a", Name: "F", Arguments: `{}`}, {Index: 0, ID: "b", Name: "G", Arguments: `{"z":true}`}},
			[]string{`F(a)={}`, `G(b)={"z":true}`}, nil},
		{"repeated id and name", []ToolCallDelta{{Index: 0, ID: "a", Name: "F", Arguments: `{"x"`}, {Index: 0, ID: "a", Name: "F", Arguments: `:1}`}},
			[]string{`F(a)={"x":1}`}, nil},
		{"index -1 continues latest", []ToolCallDelta{{Index: -1, ID: "a", Name: "F", Arguments: `{"x"`}, {Index: -1, Arguments: `:1}`}},
			[]string{`F(a)={"x":1}`}, nil},
		{"empty object start replaced", []ToolCallDelta{{Index: 3, ID: "a", Name: "F", Arguments: `{}`}, {Index: 3, Arguments: `{"x":1}`}},
			[]string{`F(a)={"x":1}`}, nil},
		{"missing id generated", []ToolCallDelta{{Index: 0, Name: "F"}}, []string{`F(call_1)={}`}, nil},
		{"broken arguments name the call", []ToolCallDelta{{Index: 0, ID: "a", Name: "F", Arguments: `{"x":`}}, nil, ErrInvalidArguments},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var a Assembler
			for _, d := range tt.deltas {
				a.Add(Delta{ToolCall: &d})
			}
			msg, err := a.Message()
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), "F (a)") {
					t.Fatalf("err = %v, want %v naming F (a)", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := callStrings(ToolCalls(msg)); !equalStrings(got, tt.want) {
				t.Errorf("calls = %q, want %q", got, tt.want)
			}
		})
	}
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
