package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/orchestrator/ids"
	"github.com/toolfleet/toolfleet/orchestrator/runstore"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall"
	"github.com/toolfleet/toolfleet/sdk/client"
	"github.com/toolfleet/toolfleet/sdk/llm"
)

// CallTool runs one tool call through the gateway as the run's principal,
// with the deterministic call id <run_id>/<turn>/<index>, and appends its
// result at in.ResultSeq: the one call activity (toolcall.CallActivity)
// with the run's engine. Failures the model can act on become is_error
// results; a retryable execution error is retried by Temporal after the
// delay the tool asked for, and on the last attempt becomes an error result
// too.
func (a *Activities) CallTool(ctx context.Context, in CallToolInput) (CallToolResult, error) {
	return toolcall.CallActivity[CallToolInput, CallToolResult](a.Gateway, runCalls{a})(ctx, in)
}

// runCalls is the call activity's engine of runs: the call is read from the
// transcript, its result appended to it.
type runCalls struct{ a *Activities }

// Prepare reads call in.Index of the assistant message at in.CallSeq; a
// result already at in.ResultSeq (an earlier attempt appended it) is done.
func (e runCalls) Prepare(ctx context.Context, in CallToolInput) (toolcall.Call, *CallToolResult, error) {
	if msg, err := e.a.Store.At(ctx, in.RunID, in.ResultSeq); err != nil {
		return toolcall.Call{}, nil, err
	} else if msg != nil {
		res := resultSummary(msg, "", in.NoContent)
		return toolcall.Call{}, &res, nil
	}
	assistant, err := e.a.Store.At(ctx, in.RunID, in.CallSeq)
	if err != nil {
		return toolcall.Call{}, nil, err
	}
	calls := llm.ToolCalls(assistant)
	if in.Index >= len(calls) {
		return toolcall.Call{}, nil, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("message %d has no call %d", in.CallSeq, in.Index), toolcall.ErrTypeConfig, nil)
	}
	call := calls[in.Index]
	c := toolcall.Call{RunID: in.RunID, Turn: in.Turn, CallID: ids.RunCall(in.RunID, in.Turn, in.Index), ToolID: call.GetName(),
		Input: call.GetArguments(), Principal: in.Principal, Approver: in.Approver, Origin: call}
	if in.Tool != nil {
		c.ToolID = in.Tool.ID
	}
	askPeople(&c, in)
	switch {
	case in.Program != nil:
		c.Decided = &toolcall.Outcome{Kind: in.Program.Kind, Message: in.Program.Content}
	case in.Unanswered != "":
		c.Decided = &toolcall.Outcome{Kind: toolcall.KindExecution, Message: in.Unanswered}
	case in.Denial != "":
		c.Decided = &toolcall.Outcome{Kind: toolcall.KindDenied, Message: in.Denial}
	case in.Tool == nil:
		c.Decided = &toolcall.Outcome{Kind: toolcall.KindUnknownTool}
	default:
		c.Final = int(activity.GetInfo(ctx).Attempt) >= in.MaxAttempts
	}
	return c, nil, nil
}

// Render appends the outcome at in.ResultSeq as the call's result; the
// attempt that appended it counts it.
func (e runCalls) Render(ctx context.Context, in CallToolInput, c toolcall.Call, o toolcall.Outcome) (toolcall.Rendered[CallToolResult], error) {
	part, kind, ref, took, err := e.a.resultPart(ctx, in, c, o)
	if err != nil {
		return toolcall.Rendered[CallToolResult]{}, err
	}
	counted := false
	msg := llm.NewMessage(toolfleetv1.Role_ROLE_TOOL, part)
	if err := e.a.Store.Append(ctx, in.RunID, in.ResultSeq, msg); errors.Is(err, runstore.ErrConflict) {
		if msg, err = e.a.Store.At(ctx, in.RunID, in.ResultSeq); err != nil {
			return toolcall.Rendered[CallToolResult]{}, err
		}
	} else if err != nil {
		return toolcall.Rendered[CallToolResult]{}, err
	} else {
		counted = true // by the attempt that appended the result: once per call
	}
	res := resultSummary(msg, kind, in.NoContent)
	res.Duration, res.Ref = took, ref
	status := "ok"
	if res.IsError {
		status = "error (" + string(res.Kind) + ")"
	}
	return toolcall.Rendered[CallToolResult]{Out: res, Kind: kind, Counted: counted,
		Message: fmt.Sprintf("%s in %s: %s", status, took.Round(time.Millisecond), res.Text())}, nil
}

// Publish publishes an event of the call; an event that cannot be published
// fails the attempt.
func (e runCalls) Publish(ctx context.Context, ev toolcall.Event) error {
	return e.a.Events.Publish(ctx, ev)
}

func (e runCalls) GatewayCall(d time.Duration) { e.a.Metrics.AgentGatewayCall(d) }
func (e runCalls) ToolCall(k toolcall.Kind)    { e.a.Metrics.AgentToolCall(string(k)) }

// resultPart renders an outcome as the result part the model reads.
func (a *Activities) resultPart(ctx context.Context, in CallToolInput, c toolcall.Call, o toolcall.Outcome) (_ *toolfleetv1.Part, kind toolcall.Kind, ref string, took time.Duration, _ error) {
	call := c.Origin
	switch {
	case in.Program != nil:
		return llm.ResultPart(call.GetId(), call.GetName(), o.Message, o.Kind != toolcall.KindOK), o.Kind, "", 0, nil
	case o.Kind == toolcall.KindDenied:
		return llm.ResultPart(call.GetId(), call.GetName(), "The call was not approved: "+o.Message, true), o.Kind, "", 0, nil
	case o.Kind == toolcall.KindUnknownTool:
		return llm.ResultPart(call.GetId(), call.GetName(),
			fmt.Sprintf("There is no tool named %q in this run; use one of the declared tools.", call.GetName()), true), o.Kind, "", 0, nil
	case o.Kind == toolcall.KindValidation:
		return llm.ResultPart(call.GetId(), call.GetName(), validationText(o), true), toolcall.KindValidation, "", 0, nil
	case o.Kind == toolcall.KindRefused, o.Kind == toolcall.KindRetry && !o.ToolRetry:
		// A refusal, or a gateway that stayed away on the last attempt.
		return llm.ResultPart(call.GetId(), call.GetName(), o.Message, true), toolcall.KindRefused, "", 0, nil
	case o.Kind == toolcall.KindRetry, o.Kind == toolcall.KindExecution:
		text := o.Message
		if o.Hint != "" {
			text += "\n" + o.Hint
		}
		return llm.ResultPart(call.GetId(), call.GetName(), text, true), toolcall.KindExecution, "", o.Duration, nil
	}
	text, err := json.Marshal(o.Value.AsInterface())
	if err != nil {
		return nil, "", "", 0, temporal.NewNonRetryableApplicationError("encode result: "+err.Error(), toolcall.ErrTypeConfig, nil)
	}
	if len(text) <= a.inlineLimit() {
		p := llm.ResultPart(call.GetId(), call.GetName(), string(text), false)
		p.GetToolResult().Structured = o.Value
		return p, toolcall.KindOK, "", o.Duration, nil
	}
	if ref, err = a.Store.PutBlob(ctx, in.RunID, text); err != nil {
		return nil, "", "", 0, err
	}
	preview := fmt.Sprintf("%s\n[result truncated: %d bytes in total; this is the first %d. Full result stored as %s.]",
		clip(string(text), previewBytes), len(text), previewBytes, ref)
	return llm.ResultPart(call.GetId(), call.GetName(), preview, false), toolcall.KindOK, ref, o.Duration, nil
}

// validationText lists a validation error's field messages for a model, each
// said once.
func validationText(o toolcall.Outcome) string {
	return "The input was invalid. " + (&client.ValidationError{Message: o.Message, ParameterErrors: o.Fields}).Text()
}

// contentDigest identifies content without holding it: the first 16 bytes
// of its sha256, in hex.
func contentDigest(text string) string {
	sum := sha256.Sum256([]byte(text))
	return hex.EncodeToString(sum[:16])
}

// digestText is how a digest and size read in events and states.
func digestText(sum string, n int) string { return fmt.Sprintf("sha256:%s (%d bytes)", sum, n) }

// Text is the result's preview, or its digest and size with NoContent.
func (r CallToolResult) Text() string {
	if r.ContentSHA256 != "" {
		return digestText(r.ContentSHA256, r.ContentBytes)
	}
	return r.Preview
}

func resultSummary(msg *toolfleetv1.Message, kind toolcall.Kind, noContent bool) CallToolResult {
	var r *toolfleetv1.ToolResult
	for _, p := range msg.GetParts() {
		if tr := p.GetToolResult(); tr != nil {
			r = tr
			break
		}
	}
	if kind == "" {
		kind = toolcall.KindOK
		if r.GetIsError() {
			kind = toolcall.KindExecution
		}
	}
	if noContent {
		return CallToolResult{Kind: kind, IsError: r.GetIsError(), ContentSHA256: contentDigest(r.GetContent()), ContentBytes: len(r.GetContent())}
	}
	return CallToolResult{Kind: kind, IsError: r.GetIsError(), Preview: clip(r.GetContent(), summaryBytes)}
}
