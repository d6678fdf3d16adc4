package e2e_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolfleet/toolfleet/e2e"
	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/client"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/wire"
)

// gatewayAddr is the address of the fleet the examples run against: a real
// gateway with a real calculator worker on loopback.
var gatewayAddr string

func TestMain(m *testing.M) {
	fleet, err := e2e.New(context.Background(), e2e.Options{})
	if err != nil {
		log.Fatal(err)
	}
	gatewayAddr = fleet.Addr
	code := m.Run()
	if err := fleet.Close(); err != nil {
		log.Print(err)
		code = 1
	}
	os.Exit(code)
}

// Call a tool and decode its result.
func Example_call() {
	ctx := context.Background()
	c, err := client.New(gatewayAddr) // add client.WithToken(...) when auth is on
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	res, err := c.Call(ctx, "Calculator.Add", map[string]any{"a": 2, "b": 3})
	if err != nil {
		log.Fatal(err) // a *client.ServerError or *client.ValidationError
	}
	var out struct{ Result float64 }
	if err := res.Decode(&out); err != nil {
		log.Fatal(err) // a *client.ExecutionError
	}
	fmt.Println(res.ToolID, out.Result)
	// Output: Calculator.Add@1.0.0 5
}

// The three kinds of failure, told apart.
func Example_failures() {
	ctx := context.Background()
	c, err := client.New(gatewayAddr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// A server error: the tool did not run.
	_, err = c.Call(ctx, "Calculator.Nope", nil)
	var se *client.ServerError
	fmt.Println(errors.As(err, &se), se.Code)

	// A validation error: the input broke the contract.
	_, err = c.Call(ctx, "Calculator.Evaluate", map[string]any{"expression": ""})
	var ve *client.ValidationError
	fmt.Println(errors.As(err, &ve), len(ve.ParameterErrors) > 0)

	// An execution error: the tool ran and failed.
	res, err := c.Call(ctx, "Calculator.Divide", map[string]any{"a": 1, "b": 0})
	if err != nil {
		log.Fatal(err)
	}
	var ee *client.ExecutionError
	fmt.Println(res.Success, res.Error.GetMessage(), errors.As(res.Err(), &ee))
	// Output:
	// true NotFound
	// true true
	// false cannot divide by zero true
}

// Hand the served tools to a model in its provider's format.
func Example_toolsFor() {
	ctx := context.Background()
	c, err := client.New(gatewayAddr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	body, err := c.ToolsFor(ctx, wire.OpenAIChat{}, &toolfleetv1.ListToolsRequest{Toolkit: "Calculator"})
	if err != nil {
		log.Fatal(err)
	}
	var tools []struct {
		Function struct{ Name string }
	}
	if err := json.Unmarshal(body, &tools); err != nil {
		log.Fatal(err)
	}
	for _, t := range tools {
		fmt.Println(t.Function.Name)
	}
	// Output:
	// Calculator_Add
	// Calculator_Divide
	// Calculator_Evaluate
	// Calculator_Multiply
	// Calculator_Subtract
}

// Run the tool calls of a provider response and get the messages to send back.
func Example_handleResponse() {
	ctx := context.Background()
	c, err := client.New(gatewayAddr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// What an OpenAI Chat Completions response asking for two tools looks like.
	f := wire.OpenAIChat{}
	body, err := f.RenderResponse(llm.NewMessage(toolfleetv1.Role_ROLE_ASSISTANT,
		llm.CallPart("call_1", "Calculator_Multiply", map[string]any{"a": 6, "b": 7}),
		llm.CallPart("call_2", "Calculator_Divide", map[string]any{"a": 1, "b": 0})))
	if err != nil {
		log.Fatal(err)
	}

	turn, err := c.HandleResponse(ctx, f, body)
	if err != nil {
		log.Fatal(err)
	}
	for _, p := range turn.Results.GetParts() {
		r := p.GetToolResult()
		fmt.Println(r.GetCallId(), r.GetIsError(), r.GetContent())
	}
	// The next request: the conversation so far plus the turn's messages.
	next, err := f.RenderRequest(&llm.Request{Model: "gpt-4o", Messages: append([]*toolfleetv1.Message{llm.User("6*7 and 1/0?")}, turn.Messages()...)})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(json.Valid(next))
	// Output:
	// call_1 false {"result":42}
	// call_2 true cannot divide by zero
	// The divisor b was 0. Division by zero is undefined; ask for a non-zero divisor instead of retrying.
	// true
}

func input(t *testing.T, m map[string]any) *structpb.Struct {
	t.Helper()
	s, err := client.InputOf(m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
