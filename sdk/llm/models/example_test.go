package models_test

import (
	"context"
	"fmt"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/models"
)

// A spec from a command line opens the scripted demo model, which needs no
// key; its first turn calls two tools in parallel.
func ExampleOpen() {
	spec, err := llm.ParseSpec("scripted:demo")
	if err != nil {
		panic(err)
	}
	model, err := models.Open(context.Background(), spec)
	if err != nil {
		panic(err)
	}
	tools := []*toolfleetv1.ToolDefinition{{ModelName: "Calculator_Add"}, {ModelName: "Clock_Now"}}
	msg, err := model.Complete(context.Background(), &llm.Request{Messages: []*toolfleetv1.Message{llm.User("What is 40 + 2?")}, Tools: tools})
	if err != nil {
		panic(err)
	}
	fmt.Println(llm.MessageText(msg))
	for _, c := range llm.ToolCalls(msg) {
		fmt.Println(c.GetName(), c.GetArguments().AsMap())
	}
	// Output:
	// I'll add 40 and 2, and check the time while I'm at it.
	// Calculator_Add map[a:40 b:2]
	// Clock_Now map[]
}

// A key reference that points nowhere fails when the model is opened, with
// an error that names the variable and never a value.
func ExampleOpen_missingKey() {
	spec := llm.Spec{Provider: llm.ProviderAnthropic, Name: "claude-sonnet-4-5", KeyRef: "env:TOOLFLEET_EXAMPLE_UNSET_KEY"}
	_, err := models.Open(context.Background(), spec)
	fmt.Println(err)
	// Output:
	// open anthropic:claude-sonnet-4-5: llm: invalid model spec: key reference env:TOOLFLEET_EXAMPLE_UNSET_KEY: environment variable TOOLFLEET_EXAMPLE_UNSET_KEY is not set
}
