package llm

import (
	"errors"
	"strings"
	"testing"
)

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
