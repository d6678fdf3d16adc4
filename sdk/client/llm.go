package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/wire"
)

// ToolsFor renders the tools matching req (nil: the latest version of every
// tool) as f's tool declarations: the JSON array that goes into a request body,
// e.g. OpenAI's "tools" or Gemini's "function_declarations". Tools appear under
// their model names ("Calculator_Add"); [Client.HandleResponse] maps them back.
func (c *Client) ToolsFor(ctx context.Context, f wire.Format, req *toolfleetv1.ListToolsRequest) ([]byte, error) {
	defs, err := c.Tools(ctx, req)
	if err != nil {
		return nil, err
	}
	body, err := f.RenderTools(defs, false)
	if err != nil {
		return nil, fmt.Errorf("client: render tools for %s: %w", f.Name(), err)
	}
	return body, nil
}

// Turn is a model response whose tool calls ran.
type Turn struct {
	// Assistant is the model's message, parsed.
	Assistant *toolfleetv1.Message
	// Results is the ROLE_TOOL message with one result per call, in call order;
	// nil when the model called no tool (the conversation may end).
	Results *toolfleetv1.Message
}

// Messages returns the messages to append to the conversation before the next
// model request: the assistant message and, when tools ran, their results.
// Render the next request with the format's RenderRequest.
func (t *Turn) Messages() []*toolfleetv1.Message {
	if t.Results == nil {
		return []*toolfleetv1.Message{t.Assistant}
	}
	return []*toolfleetv1.Message{t.Assistant, t.Results}
}

// HandleResponse parses a non-streamed response body of format f, runs its tool
// calls through the gateway and returns the turn (see [Client.RunToolCalls]).
func (c *Client) HandleResponse(ctx context.Context, f wire.Format, body []byte) (*Turn, error) {
	msg, err := f.ParseResponse(body)
	if err != nil {
		return nil, fmt.Errorf("client: parse %s response: %w", f.Name(), err)
	}
	results, err := c.RunToolCalls(ctx, msg)
	if err != nil {
		return nil, err
	}
	return &Turn{Assistant: msg, Results: results}, nil
}

// RunToolCalls runs the tool calls of an assistant message in one CallTools
// request and returns a ROLE_TOOL message with their results (nil when msg has
// no calls). Failures a model can act on become results with is_error set:
// execution errors (with the tool's prompt hint), validation errors (with every
// field message), unknown tools and other failures before the tool ran. Only a
// failure of the whole request or a rejected token is returned as an error.
// Developer messages never reach the model.
func (c *Client) RunToolCalls(ctx context.Context, msg *toolfleetv1.Message) (*toolfleetv1.Message, error) {
	calls := llm.ToolCalls(msg)
	if len(calls) == 0 {
		return nil, nil
	}
	reqs := make([]*toolfleetv1.CallToolRequest, len(calls))
	for i, call := range calls {
		// The gateway resolves model names ("Calculator_Add") like tool ids.
		reqs[i] = &toolfleetv1.CallToolRequest{ToolId: call.GetName(), Input: call.GetArguments()}
	}
	outcomes, err := c.CallTools(ctx, reqs...)
	if err != nil {
		return nil, err
	}
	out := llm.NewMessage(toolfleetv1.Role_ROLE_TOOL)
	for i, call := range calls {
		part, err := resultPart(call, outcomes[i])
		if err != nil {
			return nil, err
		}
		out.Parts = append(out.Parts, part)
	}
	return out, nil
}

// resultPart renders one outcome as a tool-result part for the model.
func resultPart(call *toolfleetv1.ToolCall, o Outcome) (*toolfleetv1.Part, error) {
	var se *ServerError
	var ve *ValidationError
	switch {
	case errors.As(o.Err, &se) && se.Code == codes.Unauthenticated:
		return nil, se // a configuration problem, not something the model can fix
	case errors.As(o.Err, &se):
		return llm.ResultPart(call.GetId(), call.GetName(), se.Message, true), nil
	case errors.As(o.Err, &ve):
		return llm.ResultPart(call.GetId(), call.GetName(), ve.Text(), true), nil
	case o.Err != nil:
		return nil, o.Err
	case !o.Result.Success:
		text := o.Result.Error.GetMessage()
		if hint := o.Result.Error.GetAdditionalPromptContent(); hint != "" {
			text += "\n" + hint
		}
		return llm.ResultPart(call.GetId(), call.GetName(), text, true), nil
	}
	text, err := json.Marshal(o.Result.Value.AsInterface())
	if err != nil {
		return nil, fmt.Errorf("client: result of %s: %w", call.GetName(), err)
	}
	p := llm.ResultPart(call.GetId(), call.GetName(), string(text), false)
	p.GetToolResult().Structured = o.Result.Value
	return p, nil
}
