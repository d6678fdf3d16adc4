package dialect

import (
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm"
)

// bigArgs is a tool call's arguments as a model writes them: a 64-bit
// revision that float64 would round to 9007199254740992, the largest
// uint64, and numbers float64 holds exactly.
const bigArgs = `{"key":"k","revision":9007199254740993,"max":18446744073709551615,"neg":-9223372036854775807,"safe":9007199254740992,"ratio":0.25,"exp":1e3}`

// wantBig is how the canonical arguments carry bigArgs.

// wantBig is how the canonical arguments carry bigArgs.
const wantBig = `{"exp":1000,"key":"k","max":"18446744073709551615","neg":"-9223372036854775807","ratio":0.25,"revision":"9007199254740993","safe":9007199254740992}`

// calculatorTools are the tools every fixture declares.
func calculatorTools(t testing.TB) []*toolfleetv1.ToolDefinition {
	t.Helper()
	schema := func(op string) *structpb.Struct {
		s, err := structpb.NewStruct(map[string]any{
			"type": "object",
			"properties": map[string]any{
				"a": map[string]any{"type": "number", "description": "first operand"},
				"b": map[string]any{"type": "number", "description": "second operand"},
			},
			"required": []any{"a", "b"},
		})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	return []*toolfleetv1.ToolDefinition{
		{ModelName: "Calculator_Add", Description: "Add two numbers.", InputSchema: schema("add")},
		{ModelName: "Calculator_Mul", Description: "Multiply two numbers.", InputSchema: schema("mul")},
	}
}

// fixtureConversation is a two-call tool conversation with every feature:
// system prompt, thinking, parallel calls, a failed result, a follow-up.
func fixtureConversation() []*toolfleetv1.Message {
	return []*toolfleetv1.Message{
		llm.System("You are a calculator."),
		llm.User("What is 2+3 and 4*5?"),
		llm.NewMessage(toolfleetv1.Role_ROLE_ASSISTANT,
			thinkingPart("Two independent sums.", "sig-1"),
			llm.Text("Let me compute."),
			llm.CallPart("call_1", "Calculator_Add", map[string]any{"a": 2, "b": 3}),
			llm.CallPart("call_2", "Calculator_Mul", map[string]any{"a": 4, "b": 5}),
		),
		llm.NewMessage(toolfleetv1.Role_ROLE_TOOL,
			llm.ResultPart("call_1", "Calculator_Add", "5", false),
			llm.ResultPart("call_2", "Calculator_Mul", "multiplier offline", true),
		),
		llm.User("Retry the product, please."),
		llm.NewMessage(toolfleetv1.Role_ROLE_ASSISTANT, llm.Text("2+3=5; the product failed.")),
	}
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

func thinkingPart(text, sig string) *toolfleetv1.Part {
	return &toolfleetv1.Part{Kind: &toolfleetv1.Part_Thinking{Thinking: &toolfleetv1.Thinking{Text: text, Signature: []byte(sig)}}}
}

func readTestdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}
