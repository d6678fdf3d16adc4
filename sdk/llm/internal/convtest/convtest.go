// Package convtest holds the fixtures the tests of sdk/llm's layers (the
// wire formats, the text protocols) share: the calculator tools, a
// conversation with every feature, arguments with 64-bit numbers, and the
// check that such arguments reach a tool unrounded. Tests only.
package convtest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	kvv1 "github.com/toolfleet/toolfleet/gen/tools/kv/v1"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/internal/canon"
	"github.com/toolfleet/toolfleet/sdk/tool"
)

// BigArgs is a tool call's arguments as a model writes them: a 64-bit
// revision that float64 would round to 9007199254740992, the largest
// uint64, and numbers float64 holds exactly.
const BigArgs = `{"key":"k","revision":9007199254740993,"max":18446744073709551615,"neg":-9223372036854775807,"safe":9007199254740992,"ratio":0.25,"exp":1e3}`

// WantBig is how the canonical arguments carry BigArgs.
const WantBig = `{"exp":1000,"key":"k","max":"18446744073709551615","neg":"-9223372036854775807","ratio":0.25,"revision":"9007199254740993","safe":9007199254740992}`

// CalculatorTools are the tools every fixture declares.
func CalculatorTools(t testing.TB) []*toolfleetv1.ToolDefinition {
	t.Helper()
	schema := func() *structpb.Struct {
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
		{ModelName: "Calculator_Add", Description: "Add two numbers.", InputSchema: schema()},
		{ModelName: "Calculator_Mul", Description: "Multiply two numbers.", InputSchema: schema()},
	}
}

// ThinkingPart is a thinking part with a signature.
func ThinkingPart(text, sig string) *toolfleetv1.Part {
	return &toolfleetv1.Part{Kind: &toolfleetv1.Part_Thinking{Thinking: &toolfleetv1.Thinking{Text: text, Signature: []byte(sig)}}}
}

// Conversation is a two-call tool conversation with every feature: system
// prompt, thinking, parallel calls, a failed result, a follow-up.
func Conversation() []*toolfleetv1.Message {
	return []*toolfleetv1.Message{
		llm.System("You are a calculator."),
		llm.User("What is 2+3 and 4*5?"),
		llm.NewMessage(toolfleetv1.Role_ROLE_ASSISTANT,
			ThinkingPart("Two independent sums.", "sig-1"),
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

// ReadTestdata reads testdata/name of the test's package.
func ReadTestdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// JSONString quotes s as a JSON string (s holds no backslash).
func JSONString(s string) string {
	return `"` + strings.ReplaceAll(s, `"`, `\"`) + `"`
}

// AssertReachesTool decodes the call's key and revision the way a worker
// does (sdk/tool.DecodeInputStruct: strict protojson, then protovalidate)
// into KV.Get's input and checks the revision arrived unrounded.
func AssertReachesTool(t *testing.T, c *toolfleetv1.ToolCall) {
	t.Helper()
	f := c.GetArguments().GetFields()
	input := &structpb.Struct{Fields: map[string]*structpb.Value{"key": f["key"], "revision": f["revision"]}}
	msg, verr, err := tool.DecodeInputStruct((&kvv1.GetRequest{}).ProtoReflect().Descriptor(), input)
	if err != nil || verr != nil {
		t.Fatalf("tool input %v: %v %v", input, verr, err)
	}
	if got := msg.(*kvv1.GetRequest).GetRevision(); got != 9007199254740993 {
		t.Errorf("revision reached the tool as %d", got)
	}
}

// TypedTool is a tool whose schema has every JSON type, unions and null.
func TypedTool(t testing.TB) *toolfleetv1.ToolDefinition {
	t.Helper()
	s, err := structpb.NewStruct(map[string]any{
		"type": "object",
		"properties": map[string]any{
			"city":    map[string]any{"type": "string"},
			"days":    map[string]any{"type": "integer"},
			"metric":  map[string]any{"type": "boolean"},
			"tags":    map[string]any{"type": "array", "items": map[string]any{"type": "string"}},
			"id":      map[string]any{"type": []any{"string", "integer"}},
			"opts":    map[string]any{"type": "object"},
			"ratio":   map[string]any{"type": "number"},
			"comment": map[string]any{"type": []any{"string", "null"}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return &toolfleetv1.ToolDefinition{ModelName: "Weather_Forecast", Description: "Forecast.", InputSchema: s}
}

// CallStrings renders calls as name(id)=exact-arguments, for comparisons.
func CallStrings(calls []*toolfleetv1.ToolCall) []string {
	var out []string
	for _, c := range calls {
		out = append(out, c.GetName()+"("+c.GetId()+")="+string(canon.EncodeArguments(c.GetArguments())))
	}
	return out
}
