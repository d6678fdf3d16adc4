package conformance

import (
	"context"
	"fmt"
	"strings"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	conformancev1 "github.com/toolfleet/toolfleet/gen/tools/conformance/v1"
	"github.com/toolfleet/toolfleet/sdk/tool"
)

// The fixture tools of the input-required scenarios (SEP-2322): each asks its
// caller with tool.AskInput and decides from the answers of the next round.

// StateOK is the word test_input_required_result_request_state answers with
// when its state came back.
const StateOK = "state-ok"

// States the fixtures carry between rounds.
var (
	confirmState = []byte("confirm-pending")
	round1State  = []byte("multi-round:1")
)

func stringSchema(field string) map[string]any {
	return map[string]any{"type": "object", "properties": map[string]any{field: map[string]any{"type": "string"}}, "required": []any{field}}
}

func boolSchema(field string) map[string]any {
	return map[string]any{"type": "object", "properties": map[string]any{field: map[string]any{"type": "boolean"}}, "required": []any{field}}
}

func sampling(prompt string, maxTokens int) map[string]any {
	return map[string]any{
		"messages":  []any{map[string]any{"role": "user", "content": map[string]any{"type": "text", "text": prompt}}},
		"maxTokens": maxTokens,
	}
}

// accepted returns the content of an accepted elicitation answer to key.
func accepted(ctx context.Context, key string) (map[string]any, bool) {
	a, ok := tool.InputResponse(ctx, key)
	if !ok || a["action"] != "accept" {
		return nil, false
	}
	c, ok := a["content"].(map[string]any)
	return c, ok
}

// sampled returns the text of a sampling answer to key.
func sampled(ctx context.Context, key string) (string, bool) {
	a, ok := tool.InputResponse(ctx, key)
	if !ok {
		return "", false
	}
	c, _ := a["content"].(map[string]any)
	t, ok := c["text"].(string)
	return t, ok
}

// rootsOf returns the root URIs of a roots/list answer to key.
func rootsOf(ctx context.Context, key string) ([]string, bool) {
	a, ok := tool.InputResponse(ctx, key)
	if !ok {
		return nil, false
	}
	rs, ok := a["roots"].([]any)
	if !ok {
		return nil, false
	}
	uris := []string{}
	for _, r := range rs {
		if m, ok := r.(map[string]any); ok {
			if u, ok := m["uri"].(string); ok {
				uris = append(uris, u)
			}
		}
	}
	return uris, true
}

func askName() *tool.InputRequiredError {
	return tool.AskInput(tool.Elicit("user_name", "What is your name?", stringSchema("name")))
}

// InputRequiredElicitation greets the caller by the name it gives.
func (s *Service) InputRequiredElicitation(ctx context.Context, _ *conformancev1.InputRequiredElicitationRequest) (*conformancev1.InputRequiredElicitationResponse, error) {
	c, ok := accepted(ctx, "user_name")
	name, _ := c["name"].(string)
	if !ok || name == "" {
		return nil, askName() // unanswered, declined or malformed: ask again
	}
	return &conformancev1.InputRequiredElicitationResponse{Content: content(text(fmt.Sprintf("Hello, %s!", name)))}, nil
}

// InputRequiredSampling returns what the caller's model answered.
func (s *Service) InputRequiredSampling(ctx context.Context, _ *conformancev1.InputRequiredSamplingRequest) (*conformancev1.InputRequiredSamplingResponse, error) {
	t, ok := sampled(ctx, "capital_question")
	if !ok {
		return nil, tool.AskInput(tool.Sample("capital_question", sampling("What is the capital of France?", 100)))
	}
	return &conformancev1.InputRequiredSamplingResponse{Content: content(text("The model answered: " + t))}, nil
}

// InputRequiredListRoots lists the caller's roots.
func (s *Service) InputRequiredListRoots(ctx context.Context, _ *conformancev1.InputRequiredListRootsRequest) (*conformancev1.InputRequiredListRootsResponse, error) {
	uris, ok := rootsOf(ctx, "client_roots")
	if !ok {
		return nil, tool.AskInput(tool.ListRoots("client_roots"))
	}
	return &conformancev1.InputRequiredListRootsResponse{Content: content(text(fmt.Sprintf("%d roots: %s", len(uris), strings.Join(uris, ", "))))}, nil
}

// InputRequiredRequestState answers state-ok once its confirmation comes back
// with the state it asked with.
func (s *Service) InputRequiredRequestState(ctx context.Context, _ *conformancev1.InputRequiredRequestStateRequest) (*conformancev1.InputRequiredRequestStateResponse, error) {
	state, has := tool.RequestState(ctx)
	c, ok := accepted(ctx, "confirm")
	if !ok || !has || string(state) != string(confirmState) {
		return nil, tool.AskInput(tool.Elicit("confirm", "Please confirm", boolSchema("ok"))).WithState(confirmState)
	}
	return &conformancev1.InputRequiredRequestStateResponse{Content: content(text(fmt.Sprintf("%s: confirmed=%v", StateOK, c["ok"])))}, nil
}

// InputRequiredMultipleInputs asks three kinds at once.
func (s *Service) InputRequiredMultipleInputs(ctx context.Context, _ *conformancev1.InputRequiredMultipleInputsRequest) (*conformancev1.InputRequiredMultipleInputsResponse, error) {
	c, okName := accepted(ctx, "user_name")
	greeting, okGreeting := sampled(ctx, "greeting")
	uris, okRoots := rootsOf(ctx, "client_roots")
	if !okName || !okGreeting || !okRoots {
		return nil, tool.AskInput(
			tool.Elicit("user_name", "What is your name?", stringSchema("name")),
			tool.Sample("greeting", sampling("Generate a greeting", 50)),
			tool.ListRoots("client_roots"),
		).WithState([]byte("multiple-inputs"))
	}
	return &conformancev1.InputRequiredMultipleInputsResponse{Content: content(text(fmt.Sprintf("%s %v (roots: %s)", greeting, c["name"], strings.Join(uris, ", "))))}, nil
}

// InputRequiredMultiRound asks for a name, then for a colour.
func (s *Service) InputRequiredMultiRound(ctx context.Context, _ *conformancev1.InputRequiredMultiRoundRequest) (*conformancev1.InputRequiredMultiRoundResponse, error) {
	state, _ := tool.RequestState(ctx)
	switch {
	case strings.HasPrefix(string(state), "multi-round:2:"):
		if c, ok := accepted(ctx, "step2"); ok {
			name := strings.TrimPrefix(string(state), "multi-round:2:")
			return &conformancev1.InputRequiredMultiRoundResponse{Content: content(text(fmt.Sprintf("%s likes %v", name, c["color"])))}, nil
		}
	case string(state) == string(round1State):
		if c, ok := accepted(ctx, "step1"); ok {
			name, _ := c["name"].(string)
			return nil, tool.AskInput(tool.Elicit("step2", "Step 2: What is your favorite color?", stringSchema("color"))).
				WithState([]byte("multi-round:2:" + name))
		}
	}
	return nil, tool.AskInput(tool.Elicit("step1", "Step 1: What is your name?", stringSchema("name"))).WithState(round1State)
}

// InputRequiredTamperedState asks with state; the gateway refuses a changed one.
func (s *Service) InputRequiredTamperedState(ctx context.Context, _ *conformancev1.InputRequiredTamperedStateRequest) (*conformancev1.InputRequiredTamperedStateResponse, error) {
	state, has := tool.RequestState(ctx)
	if _, ok := accepted(ctx, "confirm"); !ok || !has || string(state) != string(confirmState) {
		return nil, tool.AskInput(tool.Elicit("confirm", "Please confirm", boolSchema("ok"))).WithState(confirmState)
	}
	return &conformancev1.InputRequiredTamperedStateResponse{Content: content(text(StateOK))}, nil
}

// InputRequiredCapabilities asks only for kinds the caller can answer.
func (s *Service) InputRequiredCapabilities(ctx context.Context, _ *conformancev1.InputRequiredCapabilitiesRequest) (*conformancev1.InputRequiredCapabilitiesResponse, error) {
	var asks []tool.InputRequest
	var got []string
	if tool.CallerCan(ctx, toolfleetv1.ClientCapability_CLIENT_CAPABILITY_ELICITATION) {
		if c, ok := accepted(ctx, "user_name"); ok {
			got = append(got, fmt.Sprintf("name %v", c["name"]))
		} else {
			asks = append(asks, tool.Elicit("user_name", "What is your name?", stringSchema("name")))
		}
	}
	if tool.CallerCan(ctx, toolfleetv1.ClientCapability_CLIENT_CAPABILITY_SAMPLING) {
		if t, ok := sampled(ctx, "greeting"); ok {
			got = append(got, "greeting "+t)
		} else {
			asks = append(asks, tool.Sample("greeting", sampling("Generate a greeting", 50)))
		}
	}
	if len(asks) > 0 {
		return nil, tool.AskInput(asks...)
	}
	if len(got) == 0 {
		got = append(got, "the caller can answer neither elicitation nor sampling: nothing asked")
	}
	return &conformancev1.InputRequiredCapabilitiesResponse{Content: content(text(strings.Join(got, "; ")))}, nil
}

// MissingCapability needs the caller's sampling capability (the gateway
// refuses callers without it).
func (s *Service) MissingCapability(ctx context.Context, _ *conformancev1.MissingCapabilityRequest) (*conformancev1.MissingCapabilityResponse, error) {
	t, ok := sampled(ctx, "word")
	if !ok {
		return nil, tool.AskInput(tool.Sample("word", sampling("Say one word.", 10)))
	}
	return &conformancev1.MissingCapabilityResponse{Content: content(text("The model said: " + t))}, nil
}

// MultiInput is multi_input: it asks two questions in one round (a task
// waits on both; the caller may answer them one at a time) and answers
// with both answers.
func (s *Service) MultiInput(ctx context.Context, _ *conformancev1.MultiInputRequest) (*conformancev1.MultiInputResponse, error) {
	name, okName := accepted(ctx, "name")
	confirm, okConfirm := accepted(ctx, "confirm")
	if !okName || !okConfirm {
		return nil, tool.AskInput(
			tool.Elicit("name", "What is your name?", stringSchema("name")),
			tool.Elicit("confirm", "Do you confirm?", boolSchema("confirm")),
		)
	}
	return &conformancev1.MultiInputResponse{Content: content(text(fmt.Sprintf("Got name %v and confirm %v.", name["name"], confirm["confirm"])))}, nil
}

// WithTask is test_tool_with_task: it asks for the caller's name before it
// starts, so an MCP client answers inline and the gateway then runs the call
// as a task, which greets the name.
func (s *Service) WithTask(ctx context.Context, _ *conformancev1.WithTaskRequest) (*conformancev1.WithTaskResponse, error) {
	c, ok := accepted(ctx, "user_name")
	name, _ := c["name"].(string)
	if !ok || name == "" {
		return nil, askName()
	}
	return &conformancev1.WithTaskResponse{Content: content(text(fmt.Sprintf("Hello, %s! (from the task)", name)))}, nil
}
