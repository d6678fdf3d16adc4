package models_test

import (
	"context"
	"fmt"

	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/models"
)

// A spec from a command line opens a provider's client; a local
// OpenAI-compatible server (Ollama here) needs no key. Opening sends
// nothing: the first request does.
func ExampleOpen() {
	spec, err := llm.ParseSpec("openai-compatible:llama3.2")
	if err != nil {
		panic(err)
	}
	spec.BaseURL = "http://127.0.0.1:11434/v1"
	model, err := models.Open(context.Background(), spec)
	if err != nil {
		panic(err)
	}
	fmt.Println(spec, model != nil)
	// Output:
	// openai-compatible:llama3.2 at http://127.0.0.1:11434/v1 true
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
