package canon

import (
	"encoding/json"
	"regexp"
	"strings"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// ResultText is what a text-only wire field shows for a tool result. A
// result that only loads deferred tools (tool_references, which only
// Anthropic carries) says so as JSON: {"tool_references": [names]}.
func ResultText(r *toolfleetv1.ToolResult) string {
	if r.GetContent() == "" && r.GetStructured() == nil && len(r.GetToolReferences()) > 0 {
		return string(RawJSON(map[string][]string{"tool_references": r.GetToolReferences()}))
	}
	if r.GetContent() != "" || r.GetStructured() == nil {
		return r.GetContent()
	}
	b, err := json.Marshal(r.GetStructured().AsInterface())
	if err != nil {
		return ""
	}
	return string(b)
}

// MessageText joins the text parts of m.
func MessageText(m *toolfleetv1.Message) string {
	var b strings.Builder
	for _, p := range m.GetParts() {
		b.WriteString(p.GetText())
	}
	return b.String()
}

// ToolCalls returns the tool calls of m in order.
func ToolCalls(m *toolfleetv1.Message) []*toolfleetv1.ToolCall {
	var calls []*toolfleetv1.ToolCall
	for _, p := range m.GetParts() {
		if c := p.GetToolCall(); c != nil {
			calls = append(calls, c)
		}
	}
	return calls
}

// SystemText joins the text of all system messages, in order.
func SystemText(msgs []*toolfleetv1.Message) string {
	var parts []string
	for _, m := range msgs {
		if m.GetRole() == toolfleetv1.Role_ROLE_SYSTEM {
			parts = append(parts, MessageText(m))
		}
	}
	return strings.Join(parts, "\n\n")
}

// CallNames indexes tool-call names by id so results without a name (some
// formats need it) can be completed from the call they answer.
func CallNames(msgs []*toolfleetv1.Message) map[string]string {
	names := map[string]string{}
	for _, m := range msgs {
		for _, c := range ToolCalls(m) {
			names[c.GetId()] = c.GetName()
		}
	}
	return names
}

var ModelNamePattern = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)
