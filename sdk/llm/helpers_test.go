package llm

import (
	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm/internal/canon"
)

func callStrings(calls []*toolfleetv1.ToolCall) []string {
	var out []string
	for _, c := range calls {
		out = append(out, c.GetName()+"("+c.GetId()+")="+string(canon.EncodeArguments(c.GetArguments())))
	}
	return out
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
