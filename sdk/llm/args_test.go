package llm

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm/internal/canon"
)

// bigArgs is a tool call's arguments as a model writes them: a 64-bit
// revision that float64 would round to 9007199254740992, the largest
// uint64, and numbers float64 holds exactly.
const bigArgs = `{"key":"k","revision":9007199254740993,"max":18446744073709551615,"neg":-9223372036854775807,"safe":9007199254740992,"ratio":0.25,"exp":1e3}`

// wantBig is how the canonical arguments carry bigArgs.
const wantBig = `{"exp":1000,"key":"k","max":"18446744073709551615","neg":"-9223372036854775807","ratio":0.25,"revision":"9007199254740993","safe":9007199254740992}`

func TestXMLExactNumbers(t *testing.T) {
	t.Parallel()
	tools := []*toolfleetv1.ToolDefinition{typedTool(t)}
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

func TestExactNumber(t *testing.T) {
	t.Parallel()
	tests := []struct {
		text    string
		want    string // JSON of the Value
		wantErr bool
	}{
		{"0", "0", false},
		{"-0", "-0", false},
		{"9007199254740992", "9007199254740992", false},
		{"9007199254740993", `"9007199254740993"`, false},
		{"-9007199254740993", `"-9007199254740993"`, false},
		{"100000000000000000000", "100000000000000000000", false},
		{"123456789012345678901234567890", `"123456789012345678901234567890"`, false},
		{"0.1", "0.1", false},
		{"1e400", "", true},
		{"-1e400", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.text, func(t *testing.T) {
			t.Parallel()
			v, err := ExactNumber(tt.text)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("ExactNumber(%s) = %v, want an error", tt.text, v)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			b, err := protojson.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.ReplaceAll(string(b), " ", ""); got != tt.want {
				t.Errorf("ExactNumber(%s) = %s, want %s", tt.text, got, tt.want)
			}
		})
	}
}

// TestBlockErrorNamesCall checks that a malformed text block's error says
// which call it was, wherever the block lets the name be read.
func TestBlockErrorNamesCall(t *testing.T) {
	t.Parallel()
	tools := []*toolfleetv1.ToolDefinition{typedTool(t)}
	tests := []struct {
		name     string
		p        TextProtocol
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
			if !errors.As(err, &be) || !errors.Is(err, ErrMalformed) {
				t.Fatalf("err = %v, want a BlockError", err)
			}
			if be.Call != tt.wantCall {
				t.Errorf("Call = %q, want %q", be.Call, tt.wantCall)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("message %q does not contain %q", err, tt.wantMsg)
			}
			if got := errors.Is(err, ErrInvalidArguments); got != tt.isArgs {
				t.Errorf("errors.Is(err, ErrInvalidArguments) = %v, want %v", got, tt.isArgs)
			}
		})
	}
}
