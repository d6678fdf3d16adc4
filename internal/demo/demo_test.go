package demo

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	calculatorv1 "github.com/toolfleet/toolfleet/gen/tools/calculator/v1"
	clockv1 "github.com/toolfleet/toolfleet/gen/tools/clock/v1"
	jsonqv1 "github.com/toolfleet/toolfleet/gen/tools/jsonq/v1"
	kvv1 "github.com/toolfleet/toolfleet/gen/tools/kv/v1"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/tool"
)

// demoTool is a test stand-in for a bundled tool's behaviour: its
// documented output (protojson of the response message) or its error text.
// The input is checked first against the tool's real contract.
type demoTool func(args map[string]any) (string, bool)

// demoContracts are the input messages of the bundled tools.
var demoContracts = map[string]protoreflect.MessageDescriptor{
	"Calculator_Add":  (&calculatorv1.AddRequest{}).ProtoReflect().Descriptor(),
	"Clock_Now":       (&clockv1.NowRequest{}).ProtoReflect().Descriptor(),
	"JSONQuery_Query": (&jsonqv1.QueryRequest{}).ProtoReflect().Descriptor(),
	"KV_Put":          (&kvv1.PutRequest{}).ProtoReflect().Descriptor(),
	"KV_Get":          (&kvv1.GetRequest{}).ProtoReflect().Descriptor(),
}

// validated runs a call's arguments through the same decoding and
// protovalidate rules a worker applies (sdk/tool.DecodeInputStruct) and
// reports a violation the way a model is shown one.
func validated(t *testing.T, name string, args *structpb.Struct, run demoTool) (string, bool) {
	t.Helper()
	_, verr, err := tool.DecodeInputStruct(demoContracts[name], args)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if verr != nil {
		var fields []string
		for path, msg := range verr.GetParameterErrors() {
			fields = append(fields, path+": "+msg)
		}
		sort.Strings(fields)
		return "invalid input: " + strings.Join(fields, "; "), true
	}
	return run(args.AsMap())
}

func demoTools(store map[string]string) map[string]demoTool {
	return map[string]demoTool{
		"Calculator_Add": func(a map[string]any) (string, bool) {
			return fmt.Sprintf(`{"result":%v}`, a["a"].(float64)+a["b"].(float64)), false
		},
		"Clock_Now": func(map[string]any) (string, bool) {
			return `{"time":{"timestamp":"2026-11-23T12:00:00Z","localTime":"2026-11-23T12:00:00Z","timeZone":"UTC"}}`, false
		},
		"JSONQuery_Query": func(a map[string]any) (string, bool) {
			doc := a["document"].(map[string]any)
			if a["query"] != ".a + .b" {
				return "unsupported query", true
			}
			return fmt.Sprintf(`{"results":[%v]}`, doc["a"].(float64)+doc["b"].(float64)), false
		},
		"KV_Put": func(a map[string]any) (string, bool) {
			key := a["key"].(string)
			store[key] = a["value"].(string)
			return `{"revision":"1","changed":true}`, false
		},
		"KV_Get": func(a map[string]any) (string, bool) {
			v, ok := store[a["key"].(string)]
			if !ok {
				return "key not found", true
			}
			b, _ := json.Marshal(map[string]any{"key": a["key"], "value": v, "revision": "1"})
			return string(b), false
		},
	}
}

func demoDefs(names ...string) []*toolfleetv1.ToolDefinition {
	var defs []*toolfleetv1.ToolDefinition
	for _, n := range names {
		defs = append(defs, &toolfleetv1.ToolDefinition{ModelName: n, Description: n, InputSchema: &structpb.Struct{}})
	}
	return defs
}

// runDemo plays a run loop: model turn, tool calls, results, until the
// model answers; it returns the calls of every turn and the answer.
func runDemo(t *testing.T, prompt string, parallel, stream bool, tools map[string]demoTool, offered []*toolfleetv1.ToolDefinition) ([][]string, string) {
	t.Helper()
	m := New()
	req := &llm.Request{Messages: []*toolfleetv1.Message{llm.System("You are helpful."), llm.User(prompt)}, Tools: offered, ParallelToolCalls: &parallel}
	var turns [][]string
	for range 10 {
		var msg *toolfleetv1.Message
		var err error
		if stream {
			msg, err = m.Stream(t.Context(), req, nil)
		} else {
			msg, err = m.Complete(t.Context(), req)
		}
		if err != nil {
			t.Fatal(err)
		}
		if msg.GetUsage().GetInputTokens() <= 0 || msg.GetUsage().GetOutputTokens() <= 0 {
			t.Errorf("turn %d: no usage", len(turns)+1)
		}
		// The demo is stateless: the same request always gets the same turn.
		again, err := m.Complete(t.Context(), req)
		if err != nil || !proto.Equal(again, msg) {
			t.Fatalf("turn %d differs when replayed: %v\n%v\n%v", len(turns)+1, err, again, msg)
		}
		req.Messages = append(req.Messages, msg)
		calls := llm.ToolCalls(msg)
		if len(calls) == 0 {
			if msg.GetStopReason() != llm.StopEndTurn {
				t.Errorf("answer stop reason = %q", msg.GetStopReason())
			}
			return turns, llm.MessageText(msg)
		}
		var names []string
		results := llm.NewMessage(toolfleetv1.Role_ROLE_TOOL)
		for _, c := range calls {
			names = append(names, c.GetName()+string(llm.CallArguments(c)))
			content, isErr := validated(t, c.GetName(), c.GetArguments(), tools[c.GetName()])
			results.Parts = append(results.Parts, llm.ResultPart(c.GetId(), c.GetName(), content, isErr))
		}
		turns = append(turns, names)
		req.Messages = append(req.Messages, results)
	}
	t.Fatal("the demo did not answer within 10 turns")
	return nil, ""
}

func TestDemo(t *testing.T) {
	t.Parallel()
	all := demoDefs("Calculator_Add", "Clock_Now", "JSONQuery_Query", "KV_Put", "KV_Get", "KV_Delete")
	tests := []struct {
		name      string
		prompt    string
		parallel  bool
		stream    bool
		offered   []*toolfleetv1.ToolDefinition
		broken    string // a tool that always fails
		wantTurns [][]string
		wantText  []string
	}{
		{
			name: "parallel tour", prompt: "What is 40 + 2?", parallel: true, offered: all,
			wantTurns: [][]string{
				{`Calculator_Add{"a":40,"b":2}`, `Clock_Now{}`},
				{`JSONQuery_Query{"document":{"a":40,"b":2},"query":".a + .b"}`, `KV_Put{"key":"demo.sum","value":"42"}`},
				{`KV_Get{"key":"demo.sum"}`},
			},
			wantText: []string{"40 + 2 = 42.", "A jq query agrees.", `Saved under "demo.sum" (revision 1) and read back as 42.`, "It is 2026-11-23T12:00:00Z."},
		},
		{
			name: "validation error corrected", prompt: "Add 2 and 3 and save it as lucky number", parallel: true, stream: true, offered: all,
			wantTurns: [][]string{
				{`Calculator_Add{"a":2,"b":3}`, `Clock_Now{}`},
				{`JSONQuery_Query{"document":{"a":2,"b":3},"query":".a + .b"}`, `KV_Put{"key":"lucky number","value":"5"}`},
				{`KV_Put{"key":"lucky-number","value":"5"}`},
				{`KV_Get{"key":"lucky-number"}`},
			},
			wantText: []string{"2 + 3 = 5.", `Saved under "lucky-number"`, "read back as 5"},
		},
		{
			name: "one call per turn", prompt: "no numbers here", parallel: false, offered: all,
			wantTurns: [][]string{
				{`Calculator_Add{"a":2,"b":3}`}, {`Clock_Now{}`},
				{`JSONQuery_Query{"document":{"a":2,"b":3},"query":".a + .b"}`}, {`KV_Put{"key":"demo.sum","value":"5"}`},
				{`KV_Get{"key":"demo.sum"}`},
			},
			wantText: []string{"2 + 3 = 5."},
		},
		{
			name: "failing tool is reported", prompt: "add 1 and 1", parallel: true, offered: all, broken: "Calculator_Add",
			wantTurns: [][]string{{`Calculator_Add{"a":1,"b":1}`, `Clock_Now{}`}},
			wantText:  []string{"I couldn't add 1 and 1: worker unavailable"},
		},
		{
			name: "only a calculator", prompt: "add 7 and 8", parallel: true, offered: demoDefs("Calculator_Add"),
			wantTurns: [][]string{{`Calculator_Add{"a":7,"b":8}`}},
			wantText:  []string{"7 + 8 = 15."},
		},
		{
			name: "no tools", prompt: "hi", parallel: true,
			wantText: []string{"scripted demo model"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tools := demoTools(map[string]string{})
			if tt.broken != "" {
				tools[tt.broken] = func(map[string]any) (string, bool) { return "worker unavailable", true }
			}
			turns, text := runDemo(t, tt.prompt, tt.parallel, tt.stream, tools, tt.offered)
			if fmt.Sprint(turns) != fmt.Sprint(tt.wantTurns) {
				t.Errorf("turns:\n%v\nwant\n%v", turns, tt.wantTurns)
			}
			for _, w := range tt.wantText {
				if !strings.Contains(text, w) {
					t.Errorf("answer %q does not contain %q", text, w)
				}
			}
		})
	}
}

func TestDemoToolChoiceNone(t *testing.T) {
	t.Parallel()
	req := &llm.Request{Messages: []*toolfleetv1.Message{llm.User("add 4 and 5")}, Tools: demoDefs("Calculator_Add", "Clock_Now"), ToolChoice: llm.ToolChoice{Mode: llm.ToolChoiceNone}}
	msg, err := New().Complete(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(llm.ToolCalls(msg)); n != 0 || !strings.Contains(llm.MessageText(msg), "4 + 5 = 9.") {
		t.Errorf("calls = %d, text %q; want an answer without calls", n, llm.MessageText(msg))
	}
}

// In code mode the demo writes one program over the stubs the system prompt
// lists, and answers from the program's result.
func TestDemoCodeMode(t *testing.T) {
	tools := []*toolfleetv1.ToolDefinition{{ModelName: demoProgramTool}}
	req := &llm.Request{Tools: tools, Messages: []*toolfleetv1.Message{
		llm.System("Tools:\nCalculator_Add(a: number, b: number)\nKV_Put(key: string, value: string)\n"), llm.User("add 4 and 5")}}
	model := New()
	reply, err := model.Complete(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	calls := llm.ToolCalls(reply)
	if len(calls) != 1 || calls[0].GetName() != demoProgramTool {
		t.Fatalf("calls = %v, want one run_program", calls)
	}
	src := calls[0].GetArguments().GetFields()["source"].GetStringValue()
	if !strings.Contains(src, "Calculator_Add(a=a, b=b)") || !strings.Contains(src, "KV_Put(") || strings.Contains(src, "Clock_Now") || strings.Contains(src, "KV_Get") {
		t.Errorf("program uses stubs the prompt does not list, or misses one:\n%s", src)
	}
	result := `{"Calculator_Add":{"ok":true,"value":{"result":9}},"KV_Put":{"ok":false,"error":"bucket is read-only"}}`
	req.Messages = append(req.Messages, reply, llm.NewMessage(toolfleetv1.Role_ROLE_TOOL, llm.ResultPart(calls[0].GetId(), demoProgramTool, result, false)))
	if reply, err = model.Complete(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	want := `4 + 5 = 9. I could not save it: bucket is read-only. (2 tool calls in one program.)`
	if got := llm.MessageText(reply); got != want {
		t.Errorf("answer = %q, want %q", got, want)
	}
}
