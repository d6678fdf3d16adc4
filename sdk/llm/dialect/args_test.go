package dialect

import (
	"errors"
	"strings"
	"testing"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/internal/canon"
	"github.com/toolfleet/toolfleet/sdk/llm/internal/convtest"
)

func TestXMLExactNumbers(t *testing.T) {
	t.Parallel()
	tools := []*toolfleetv1.ToolDefinition{convtest.TypedTool(t)}
	tests := []struct {
		name, text, want string
	}{
		{"integer schema", "<function=Weather_Forecast><parameter=days>9007199254740993</parameter></function>", `{"days":"9007199254740993"}`},
		{"string or integer schema", "<function=Weather_Forecast><parameter=id>18446744073709551615</parameter></function>", `{"id":"18446744073709551615"}`},
		{"number schema", "<function=Weather_Forecast><parameter=ratio>9007199254740993</parameter></function>", `{"ratio":"9007199254740993"}`},
		{"no schema", "<function=Other><parameter=n>9007199254740993</parameter></function>", `{"n":"9007199254740993"}`},
		{"inside an object", "<function=Weather_Forecast><parameter=opts>{\"rev\":9007199254740993}</parameter></function>", `{"opts":{"rev":"9007199254740993"}}`},
		{"small stays a number", "<function=Weather_Forecast><parameter=days>3</parameter></function>", `{"days":3}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, calls, err := XMLFunction{}.Parse(tt.text, tools)
			if err != nil {
				t.Fatal(err)
			}
			if got := string(canon.EncodeArguments(calls[0].GetArguments())); got != tt.want {
				t.Errorf("arguments = %s, want %s", got, tt.want)
			}
		})
	}
}

// TestBlockErrorNamesCall checks that a malformed text block's error says
// which call it was, wherever the block lets the name be read.
func TestBlockErrorNamesCall(t *testing.T) {
	t.Parallel()
	tools := []*toolfleetv1.ToolDefinition{convtest.TypedTool(t)}
	tests := []struct {
		name     string
		p        llm.TextProtocol
		text     string
		wantCall string
		wantMsg  string
		isArgs   bool
	}{
		{"fenced bad json", Fenced{}, "~~~tool_call\n{\"name\":\"A\"}\n~~~\n~~~tool_call\n{\"name\":\"Calculator_Add\",\"arguments\":{\"a\":1,}}\n~~~", "Calculator_Add", "fenced tool-call block 2 (Calculator_Add)", false},
		{"fenced args not an object", Fenced{}, "~~~tool_call\n{\"name\":\"Calculator_Add\",\"arguments\":[1]}\n~~~", "Calculator_Add (call_1)", "fenced tool-call block 1 (Calculator_Add (call_1)): arguments:", true},
		{"fenced unclosed", Fenced{}, "~~~tool_call\n{\"name\":\"Calculator_Add\"}", "Calculator_Add", "block 1 (Calculator_Add): no closing", false},
		{"hermes unclosed", Hermes{}, "<tool_call>{\"name\": \"Calculator_Mul\", \"arguments\": {", "Calculator_Mul", "hermes tool-call block 1 (Calculator_Mul)", false},
		{"hermes string args bad", Hermes{}, "<tool_call>{\"name\":\"Calculator_Add\",\"id\":\"x9\",\"arguments\":\"{nope\"}</tool_call>", "Calculator_Add (x9)", "(Calculator_Add (x9)): arguments:", true},
		{"xml bad parameter", XMLFunction{}, "<function=Weather_Forecast><parameter=days>three</parameter></function>", "Weather_Forecast (call_1)", `xml tool-call block 1 (Weather_Forecast (call_1)): arguments: parameter "days"`, true},
		{"xml unclosed", XMLFunction{}, "<function=Weather_Forecast><parameter=days>3</parameter>", "Weather_Forecast", "xml tool-call block 1 (Weather_Forecast): no closing", false},
		{"name unreadable", Hermes{}, "<tool_call>{oops</tool_call>", "", "hermes tool-call block 1: ", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := tt.p.Parse(tt.text, tools)
			var be *BlockError
			if !errors.As(err, &be) || !errors.Is(err, llm.ErrMalformed) {
				t.Fatalf("err = %v, want a BlockError", err)
			}
			if be.Call != tt.wantCall {
				t.Errorf("Call = %q, want %q", be.Call, tt.wantCall)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("message %q does not contain %q", err, tt.wantMsg)
			}
			if got := errors.Is(err, llm.ErrInvalidArguments); got != tt.isArgs {
				t.Errorf("errors.Is(err, ErrInvalidArguments) = %v, want %v", got, tt.isArgs)
			}
		})
	}
}
