package llm_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/llmtest"
)

func printJSON(b []byte) {
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		panic(err)
	}
	fmt.Println(out.String())
}

// An OpenAI tools array becomes the Anthropic and the Gemini declarations.
func ExampleConvertTools() {
	openAITools := []byte(`[{"type": "function", "function": {
		"name": "get_weather",
		"description": "Current weather for a city.",
		"parameters": {"type": "object",
			"properties": {"city": {"type": "string"}, "unit": {"type": ["string", "null"], "enum": ["c", "f", null]}},
			"required": ["city", "unit"], "additionalProperties": false},
		"strict": true}}]`)

	anthropicTools, err := llm.ConvertTools(llm.OpenAIChat{}, llm.Anthropic{}, openAITools, false)
	if err != nil {
		panic(err)
	}
	geminiTools, err := llm.ConvertTools(llm.OpenAIChat{}, llm.Gemini{}, openAITools, false)
	if err != nil {
		panic(err)
	}
	fmt.Println("Anthropic:")
	printJSON(anthropicTools)
	fmt.Println("Gemini:")
	printJSON(geminiTools)
	// Output:
	// Anthropic:
	// [
	//   {
	//     "name": "get_weather",
	//     "description": "Current weather for a city.",
	//     "input_schema": {
	//       "additionalProperties": false,
	//       "properties": {
	//         "city": {
	//           "type": "string"
	//         },
	//         "unit": {
	//           "enum": [
	//             "c",
	//             "f",
	//             null
	//           ],
	//           "type": [
	//             "string",
	//             "null"
	//           ]
	//         }
	//       },
	//       "required": [
	//         "city",
	//         "unit"
	//       ],
	//       "type": "object"
	//     }
	//   }
	// ]
	// Gemini:
	// [
	//   {
	//     "functionDeclarations": [
	//       {
	//         "name": "get_weather",
	//         "description": "Current weather for a city.",
	//         "parameters": {
	//           "properties": {
	//             "city": {
	//               "type": "string"
	//             },
	//             "unit": {
	//               "enum": [
	//                 "c",
	//                 "f"
	//               ],
	//               "format": "enum",
	//               "nullable": true,
	//               "type": "string"
	//             }
	//           },
	//           "required": [
	//             "city",
	//             "unit"
	//           ],
	//           "type": "object"
	//         }
	//       }
	//     ]
	//   }
	// ]
}

// An Anthropic response with a tool call, answered with the tool's result,
// continues as an OpenAI Chat Completions conversation.
func ExampleAnthropic_ParseResponse() {
	anthropicResponse := []byte(`{"id": "msg_01", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
		"content": [
			{"type": "text", "text": "Checking the weather."},
			{"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"city": "Paris"}}],
		"stop_reason": "tool_use", "usage": {"input_tokens": 20, "output_tokens": 12}}`)

	reply, err := llm.Anthropic{}.ParseResponse(anthropicResponse)
	if err != nil {
		panic(err)
	}
	call := llm.ToolCalls(reply)[0]
	conversation := []*toolfleetv1.Message{
		llm.User("Weather in Paris?"),
		reply,
		llm.NewMessage(toolfleetv1.Role_ROLE_TOOL, llm.ResultPart(call.GetId(), call.GetName(), `{"temp_c": 18}`, false)),
	}
	body, err := llm.OpenAIChat{}.RenderRequest(&llm.Request{Model: "gpt-4o", Messages: conversation})
	if err != nil {
		panic(err)
	}
	printJSON(body)
	// Output:
	// {
	//   "model": "gpt-4o",
	//   "messages": [
	//     {
	//       "role": "user",
	//       "content": "Weather in Paris?"
	//     },
	//     {
	//       "role": "assistant",
	//       "content": "Checking the weather.",
	//       "tool_calls": [
	//         {
	//           "id": "toolu_01",
	//           "type": "function",
	//           "function": {
	//             "name": "get_weather",
	//             "arguments": "{\"city\":\"Paris\"}"
	//           }
	//         }
	//       ]
	//     },
	//     {
	//       "role": "tool",
	//       "content": "{\"temp_c\": 18}",
	//       "tool_call_id": "toolu_01"
	//     }
	//   ]
	// }
}

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

// A small open model without native tool calls answers in the fenced protocol.
func ExampleFenced_Parse() {
	output := "I'll look that up.\n~~~tool_call\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n~~~\n"
	printCalls(llm.Fenced{}.Parse(output, nil))
	// Output:
	// text: "I'll look that up."
	// call call_1 get_weather {"city":"Oslo"}
}

// Hermes-style models (Qwen 2.5, Hermes 3, …) wrap a JSON call in tags;
// some send the arguments as a JSON string.
func ExampleHermes_Parse() {
	output := `<tool_call>
{"name": "get_weather", "arguments": "{\"city\": \"Lima\"}"}
</tool_call>`
	printCalls(llm.Hermes{}.Parse(output, nil))
	// Output:
	// text: ""
	// call call_1 get_weather {"city":"Lima"}
}

// XML function blocks (Qwen3-Coder style) carry every value as text; the
// tool's schema says which are numbers, booleans or JSON.
func ExampleXMLFunction_Parse() {
	def := &toolfleetv1.ToolDefinition{ModelName: "get_forecast"}
	def.InputSchema, _ = llm.SchemaToStruct(map[string]any{"type": "object", "properties": map[string]any{
		"city":   map[string]any{"type": "string"},
		"days":   map[string]any{"type": "integer"},
		"hourly": map[string]any{"type": "boolean"},
	}})
	output := "<tool_call>\n<function=get_forecast>\n<parameter=city>\nSan José\n</parameter>\n<parameter=days>\n3\n</parameter>\n<parameter=hourly>\nfalse\n</parameter>\n</function>\n</tool_call>"
	printCalls(llm.XMLFunction{}.Parse(output, []*toolfleetv1.ToolDefinition{def}))
	// Output:
	// text: ""
	// call call_1 get_forecast {"city":"San José","days":3,"hourly":false}
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

// A gpt-oss reply in its harmony format, as a completions endpoint returns
// it: the reasoning stays out of the text, the call is typed JSON.
func ExampleDialect() {
	reply := `<|channel|>analysis<|message|>User wants the weather.<|end|>` +
		`<|start|>assistant<|channel|>commentary to=functions.Weather_Get <|constrain|>json<|message|>{"city":"Oslo"}<|call|>`
	d, _ := llm.DialectFor("openai/gpt-oss-120b")
	text, calls, err := d.Parse(reply, nil)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s: %q, %s %s\n", d.Name(), text, calls[0].GetName(), calls[0].GetArguments().GetFields()["city"].GetStringValue())
	// Output: harmony: "", Weather_Get Oslo
}

// Streaming a Kimi K2 reply a few bytes at a time: text flows, the split
// markers are never shown, and the call comes out the moment it is closed.
func ExampleTextDecoder() {
	reply := `Let me check.<|tool_calls_section_begin|><|tool_call_begin|>functions.Weather_Get:0<|tool_call_argument_begin|>{"city":"Oslo"}<|tool_call_end|><|tool_calls_section_end|>`
	dec, _ := llm.NewTextDecoder(llm.KimiK2, nil)
	for i := 0; i < len(reply); i += 7 {
		text, calls, err := dec.Write(reply[i:min(i+7, len(reply))])
		if err != nil {
			panic(err)
		}
		if text != "" {
			fmt.Printf("text %q\n", text)
		}
		for _, c := range calls {
			fmt.Printf("call %s %s\n", c.GetId(), c.GetName())
		}
	}
	if _, _, err := dec.Close(); err != nil {
		panic(err)
	}
	// Output:
	// text "Let me "
	// text "check."
	// call functions.Weather_Get:0 Weather_Get
}
