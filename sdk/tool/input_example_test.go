package tool_test

import (
	"context"
	"fmt"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/tool"
)

// greet is the body of a handler that asks its caller's human for a name.
func greet(ctx context.Context) (string, error) {
	answer, ok := tool.InputResponse(ctx, "name")
	content, _ := answer["content"].(map[string]any)
	if !ok || answer["action"] != "accept" || content["name"] == nil {
		return "", tool.AskInput(tool.Elicit("name", "What is your name?", map[string]any{
			"type":       "object",
			"properties": map[string]any{"name": map[string]any{"type": "string"}},
		})).WithState([]byte("asked-once"))
	}
	state, _ := tool.RequestState(ctx)
	return fmt.Sprintf("Hello, %v! (state %s)", content["name"], state), nil
}

// A handler asks its caller for input by returning tool.AskInput; the caller
// repeats the call with the answers, which the handler reads with
// tool.InputResponse (tool.WithInputAnswers stands in for the gateway here).
func ExampleAskInput() {
	_, err := greet(context.Background())
	q, _ := tool.AsInputRequired(status.Convert(err).Err()) // as the gateway receives it
	fmt.Println(err)
	fmt.Println(q.GetRequests()["name"].GetMethod())

	answer, _ := structpb.NewStruct(map[string]any{"action": "accept", "content": map[string]any{"name": "Ada"}})
	ctx := tool.WithInputAnswers(context.Background(), &toolfleetv1.InputAnswers{
		Responses: map[string]*structpb.Struct{"name": answer}, State: q.GetState(), HasState: true})
	out, _ := greet(ctx)
	fmt.Println(out)
	// Output:
	// input required from the caller: name (elicitation/create)
	// elicitation/create
	// Hello, Ada! (state asked-once)
}
