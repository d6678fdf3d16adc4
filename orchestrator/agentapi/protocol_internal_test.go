package agentapi

import (
	"strings"
	"testing"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm"
)

// TestSpecToolProtocol: StartRun accepts every text protocol and dialect
// as tool_protocol and refuses an unknown one before anything starts.
func TestSpecToolProtocol(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"", "native", "auto", "hermes", "xml", "qwen3_coder", "harmony", "deepseek_v31"} {
		sp, _, err := spec(&toolfleetv1.StartRunRequest{Model: "scripted:demo", ToolProtocol: p, SystemPrompt: "Be brief.",
			Messages: []*toolfleetv1.Message{llm.User("hi")}})
		if err != nil || sp.ToolProtocol != p {
			t.Errorf("tool_protocol %q: %v (spec has %q)", p, err, sp.ToolProtocol)
		}
	}
	if _, _, err := spec(&toolfleetv1.StartRunRequest{Model: "scripted:demo", ToolProtocol: "gpt-oss"}); err == nil || !strings.Contains(err.Error(), "harmony") {
		t.Errorf("unknown tool_protocol: %v", err)
	}
}
