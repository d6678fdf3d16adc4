package e2e_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/toolfleet/toolfleet/e2e"
	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/client"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/wire"
)

// TestModelHelpers runs ToolsFor and HandleResponse in every provider format:
// declarations carry the model names, and a response's calls come back as
// results (execution, validation and unknown-tool failures as is_error) that
// render into the provider's next request.
func TestModelHelpers(t *testing.T) {
	t.Parallel()
	fleet := e2e.Start(t, e2e.Options{})
	c := newClient(t, fleet.Addr)
	for _, f := range wire.Formats() {
		t.Run(f.Name(), func(t *testing.T) {
			t.Parallel()
			decl, err := c.ToolsFor(t.Context(), f, &toolfleetv1.ListToolsRequest{Toolkit: "Calculator"})
			if err != nil {
				t.Fatal(err)
			}
			defs, err := f.ParseTools(decl)
			if err != nil || len(defs) != 5 || defs[0].GetModelName() != "Calculator_Add" {
				t.Fatalf("ToolsFor: %d tools (%v) in %s", len(defs), err, decl)
			}

			body, err := f.RenderResponse(llm.NewMessage(toolfleetv1.Role_ROLE_ASSISTANT,
				llm.CallPart("c1", "Calculator_Add", map[string]any{"a": 1, "b": 2}),
				llm.CallPart("c2", "Calculator_Divide", map[string]any{"a": 1, "b": 0}),
				llm.CallPart("c3", "Calculator_Evaluate", map[string]any{"expression": ""}),
				llm.CallPart("c4", "Calculator_Nope", map[string]any{})))
			if err != nil {
				t.Fatal(err)
			}
			turn, err := c.HandleResponse(t.Context(), f, body)
			if err != nil {
				t.Fatal(err)
			}
			parts := turn.Results.GetParts()
			if len(parts) != 4 {
				t.Fatalf("%d results, want 4", len(parts))
			}
			want := []struct {
				isError bool
				content string
			}{
				{false, `{"result":3}`},
				{true, "cannot divide by zero"},
				{true, "\n- expression: "},
				{true, "unknown tool"},
			}
			for i, w := range want {
				r := parts[i].GetToolResult()
				if r.GetIsError() != w.isError || !strings.Contains(r.GetContent(), w.content) {
					t.Errorf("result %d: is_error=%v %q, want is_error=%v containing %q", i, r.GetIsError(), r.GetContent(), w.isError, w.content)
				}
			}
			next, err := f.RenderRequest(&llm.Request{Model: "m", Messages: append([]*toolfleetv1.Message{llm.User("go")}, turn.Messages()...)})
			if err != nil || !json.Valid(next) || !strings.Contains(string(next), "cannot divide by zero") {
				t.Fatalf("next request: %v\n%s", err, next)
			}
		})
	}
}

func TestRunToolCallsNeedsAToken(t *testing.T) {
	t.Parallel()
	fleet := e2e.Start(t, e2e.Options{Auth: true})
	msg := llm.NewMessage(toolfleetv1.Role_ROLE_ASSISTANT, llm.CallPart("c1", "Calculator_Add", map[string]any{"a": 1}))
	_, err := newClient(t, fleet.Addr).RunToolCalls(t.Context(), msg)
	var se *client.ServerError
	if !errors.As(err, &se) {
		t.Fatalf("err = %v, want a *ServerError: a rejected token is the developer's problem, not the model's", err)
	}
	if res, err := newClient(t, fleet.Addr).RunToolCalls(t.Context(), llm.NewMessage(toolfleetv1.Role_ROLE_ASSISTANT, llm.Text("no calls"))); res != nil || err != nil {
		t.Fatalf("a message without calls: %v, %v; want nil, nil", res, err)
	}
}
