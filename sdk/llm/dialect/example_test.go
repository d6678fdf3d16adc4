package dialect_test

import (
	"encoding/json"
	"fmt"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm/dialect"
	"github.com/toolfleet/toolfleet/sdk/llm/wire"
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

// A small open model without native tool calls answers in the fenced protocol.
func ExampleFenced_Parse() {
	output := "I'll look that up.\n~~~tool_call\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n~~~\n"
	printCalls(dialect.Fenced{}.Parse(output, nil))
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
	printCalls(dialect.Hermes{}.Parse(output, nil))
	// Output:
	// text: ""
	// call call_1 get_weather {"city":"Lima"}
}

// XML function blocks (Qwen3-Coder style) carry every value as text; the
// tool's schema says which are numbers, booleans or JSON.
func ExampleXMLFunction_Parse() {
	def := &toolfleetv1.ToolDefinition{ModelName: "get_forecast"}
	def.InputSchema, _ = wire.SchemaToStruct(map[string]any{"type": "object", "properties": map[string]any{
		"city":   map[string]any{"type": "string"},
		"days":   map[string]any{"type": "integer"},
		"hourly": map[string]any{"type": "boolean"},
	}})
	output := "<tool_call>\n<function=get_forecast>\n<parameter=city>\nSan José\n</parameter>\n<parameter=days>\n3\n</parameter>\n<parameter=hourly>\nfalse\n</parameter>\n</function>\n</tool_call>"
	printCalls(dialect.XMLFunction{}.Parse(output, []*toolfleetv1.ToolDefinition{def}))
	// Output:
	// text: ""
	// call call_1 get_forecast {"city":"San José","days":3,"hourly":false}
}

// A gpt-oss reply in its harmony format, as a completions endpoint returns
// it: the reasoning stays out of the text, the call is typed JSON.
func ExampleDialect() {
	reply := `<|channel|>analysis<|message|>User wants the weather.<|end|>` +
		`<|start|>assistant<|channel|>commentary to=functions.Weather_Get <|constrain|>json<|message|>{"city":"Oslo"}<|call|>`
	d, _ := dialect.For("openai/gpt-oss-120b")
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
	dec, _ := dialect.NewTextDecoder(dialect.KimiK2, nil)
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
