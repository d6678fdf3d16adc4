package llm_test

import (
	"context"
	"encoding/json"
	"fmt"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/llmtest"
)

// printCalls shows what a parser found.
func printCalls(text string, calls []*toolfleetv1.ToolCall, err error) {
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	fmt.Printf("text: %q\n", text)
	for _, c := range calls {
		args, _ := json.Marshal(c.GetArguments().AsMap())
		fmt.Printf("call %s %s %s\n", c.GetId(), c.GetName(), args)
	}
}

// A scripted model drives a two-step tool conversation, the way an agent
// loop runs against a real model.
func ExampleScripted() {
	model := llmtest.NewScripted(
		llmtest.CallTools("Adding first.", llm.CallPart("call_1", "Calculator_Add", map[string]any{"a": 2, "b": 3})),
		llmtest.CallTools("", llm.CallPart("call_2", "Calculator_Mul", map[string]any{"a": 5, "b": 4})),
		llmtest.SayText("(2+3)*4 = 20"),
	)
	run := func(c *toolfleetv1.ToolCall) string {
		a := c.GetArguments().AsMap()["a"].(float64)
		b := c.GetArguments().AsMap()["b"].(float64)
		if c.GetName() == "Calculator_Add" {
			return fmt.Sprint(a + b)
		}
		return fmt.Sprint(a * b)
	}
	req := &llm.Request{Messages: []*toolfleetv1.Message{llm.User("What is (2+3)*4?")}}
	for {
		reply, err := model.Complete(context.Background(), req)
		if err != nil {
			panic(err)
		}
		req.Messages = append(req.Messages, reply)
		calls := llm.ToolCalls(reply)
		if len(calls) == 0 {
			fmt.Println("answer:", llm.MessageText(reply))
			return
		}
		results := llm.NewMessage(toolfleetv1.Role_ROLE_TOOL)
		for _, c := range calls {
			out := run(c)
			fmt.Printf("%s(%v) = %s\n", c.GetName(), c.GetArguments().AsMap(), out)
			results.Parts = append(results.Parts, llm.ResultPart(c.GetId(), c.GetName(), out, false))
		}
		req.Messages = append(req.Messages, results)
	}
	// Output:
	// Calculator_Add(map[a:2 b:3]) = 5
	// Calculator_Mul(map[a:5 b:4]) = 20
	// answer: (2+3)*4 = 20
}
