package wire_test

import (
	"bytes"
	"encoding/json"
	"fmt"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/wire"
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

	anthropicTools, err := wire.ConvertTools(wire.OpenAIChat{}, wire.Anthropic{}, openAITools, false)
	if err != nil {
		panic(err)
	}
	geminiTools, err := wire.ConvertTools(wire.OpenAIChat{}, wire.Gemini{}, openAITools, false)
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

	reply, err := wire.Anthropic{}.ParseResponse(anthropicResponse)
	if err != nil {
		panic(err)
	}
	call := llm.ToolCalls(reply)[0]
	conversation := []*toolfleetv1.Message{
		llm.User("Weather in Paris?"),
		reply,
		llm.NewMessage(toolfleetv1.Role_ROLE_TOOL, llm.ResultPart(call.GetId(), call.GetName(), `{"temp_c": 18}`, false)),
	}
	body, err := wire.OpenAIChat{}.RenderRequest(&llm.Request{Model: "gpt-4o", Messages: conversation})
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
