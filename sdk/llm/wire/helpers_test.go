package wire

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/internal/canon"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata")

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

func thinkingPart(text, sig string) *toolfleetv1.Part {
	return &toolfleetv1.Part{Kind: &toolfleetv1.Part_Thinking{Thinking: &toolfleetv1.Thinking{Text: text, Signature: []byte(sig)}}}
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

// lossy lists what a format cannot carry, so round trips compare only what it can.
type lossy struct{ thinking, isError, model, parallel bool }

var formatLosses = map[string]lossy{
	"openai":           {thinking: true, isError: true},
	"openai-responses": {isError: true},
	"anthropic":        {parallel: false},
	"gemini":           {model: true, parallel: true},
	"bedrock":          {model: true, parallel: true},
}

// withoutLosses returns a copy of msgs without what the format drops.
func withoutLosses(l lossy, msgs []*toolfleetv1.Message) []*toolfleetv1.Message {
	var out []*toolfleetv1.Message
	for _, m := range msgs {
		m = proto.Clone(m).(*toolfleetv1.Message)
		var parts []*toolfleetv1.Part
		for _, p := range m.Parts {
			if l.thinking && p.GetThinking() != nil {
				continue
			}
			if r := p.GetToolResult(); r != nil && l.isError {
				r.IsError = false
			}
			parts = append(parts, p)
		}
		m.Parts = parts
		out = append(out, m)
	}
	return out
}

func assertMessages(t *testing.T, want, got []*toolfleetv1.Message) {
	t.Helper()
	if len(want) != len(got) {
		t.Fatalf("got %d messages, want %d:\n got: %s\nwant: %s", len(got), len(want), dump(got), dump(want))
	}
	for i := range want {
		if !proto.Equal(want[i], got[i]) {
			t.Fatalf("message %d differs:\n got: %s\nwant: %s", i, protojson.Format(got[i]), protojson.Format(want[i]))
		}
	}
}

func dump(msgs []*toolfleetv1.Message) string {
	s := ""
	for _, m := range msgs {
		s += protojson.Format(m) + "\n"
	}
	return s
}

// golden compares got with testdata/name, rewriting it under -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden (run with -update to create): %v", err)
	}
	if string(want) != string(got) {
		t.Fatalf("%s differs from golden:\n got: %s\nwant: %s", name, got, want)
	}
}

func readTestdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func typedTool(t testing.TB) *toolfleetv1.ToolDefinition {
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

func callStrings(calls []*toolfleetv1.ToolCall) []string {
	var out []string
	for _, c := range calls {
		out = append(out, c.GetName()+"("+c.GetId()+")="+string(canon.EncodeArguments(c.GetArguments())))
	}
	return out
}

// bigArgs is a tool call's arguments as a model writes them: a 64-bit
// revision that float64 would round to 9007199254740992, the largest
// uint64, and numbers float64 holds exactly.
const bigArgs = `{"key":"k","revision":9007199254740993,"max":18446744073709551615,"neg":-9223372036854775807,"safe":9007199254740992,"ratio":0.25,"exp":1e3}`

// wantBig is how the canonical arguments carry bigArgs.
const wantBig = `{"exp":1000,"key":"k","max":"18446744073709551615","neg":"-9223372036854775807","ratio":0.25,"revision":"9007199254740993","safe":9007199254740992}`
