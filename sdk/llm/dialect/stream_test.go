package dialect

import (
	"bytes"
	"strings"
	"testing"

	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/internal/convtest"
	"github.com/toolfleet/toolfleet/sdk/llm/wire"
)

// TestTextProtocolStream streams a small model's Hermes output through the
// tag filter and stops reading after the first closing tag.
func TestTextProtocolStream(t *testing.T) {
	t.Parallel()
	var shown strings.Builder
	filter := NewTagFilter(Hermes{})
	msg, err := wire.DecodeStream(t.Context(), wire.OpenAIChat{}, bytes.NewReader(convtest.ReadTestdata(t, "openai/stream_hermes.sse")), func(d llm.Delta) error {
		shown.WriteString(filter.Write(d.Text))
		if filter.Blocks() == 1 {
			return llm.StopStream
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	shown.WriteString(filter.Flush())
	if shown.String() != "Let me add. " {
		t.Errorf("shown = %q", shown.String())
	}
	parsed, err := ParseAuto(msg, Hermes{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := convtest.CallStrings(llm.ToolCalls(parsed)); !equalStrings(got, []string{`Calculator_Add(call_1)={"a":2,"b":3}`}) {
		t.Errorf("calls = %q", got)
	}
	if strings.Contains(llm.MessageText(msg), "SHOULD NOT BE READ") {
		t.Error("stream was read past the closing tag")
	}
}
