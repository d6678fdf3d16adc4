package agent

import (
	"strings"
	"testing"

	"github.com/toolfleet/toolfleet/sdk/llm/llmtest"
)

// TestCheckProtocol: every text protocol sdk/llm knows, the dialects
// included, is a valid tool_protocol and wraps the model; anything else is
// refused with the list of valid names.
func TestCheckProtocol(t *testing.T) {
	t.Parallel()
	for _, p := range append([]string{"", ProtocolNative, ProtocolAuto, "xml", "harmony", "kimi_k2", "deepseek_v32"}, "pythonic") {
		if err := CheckProtocol(p); err != nil {
			t.Errorf("CheckProtocol(%q) = %v", p, err)
		}
		m, err := withProtocol(llmtest.NewScripted(), p)
		if err != nil || m == nil {
			t.Errorf("withProtocol(%q) = %v, %v", p, m, err)
		}
	}
	for _, p := range []string{"Harmony", "json", "hermes ", "<script>"} {
		err := CheckProtocol(p)
		if err == nil || !strings.Contains(err.Error(), "glm45") {
			t.Errorf("CheckProtocol(%q) = %v, want a refusal listing the names", p, err)
		}
		if _, err := withProtocol(llmtest.NewScripted(), p); err == nil {
			t.Errorf("withProtocol(%q) accepted", p)
		}
	}
}
