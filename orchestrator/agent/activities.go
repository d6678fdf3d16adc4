package agent

import (
	"context"
	"fmt"
	"strings"

	"go.temporal.io/sdk/temporal"
	"google.golang.org/protobuf/proto"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/orchestrator/metrics"
	"github.com/toolfleet/toolfleet/orchestrator/program"
	"github.com/toolfleet/toolfleet/orchestrator/runstore"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall"
	"github.com/toolfleet/toolfleet/sdk/client"
)

// Activity defaults.
const (
	// DefaultInlineLimit is the largest tool result kept whole in the
	// transcript; larger ones are stored once as a blob and previewed.
	DefaultInlineLimit = 16 << 10
	// previewBytes is the size of the preview of a large result.
	previewBytes = 2 << 10
	// summaryBytes bounds the text previews that travel in history.
	summaryBytes = 160
	// maxTools bounds the tools one run may declare to a model (OpenAI's
	// limit for one request).
	maxTools = 128
	// toolSearchLimit is how many tools a run's tool search adds at most.
	toolSearchLimit = 8
)

// ErrTypeModel is the error type of a model's non-retryable failure.
const ErrTypeModel = "ModelError"

// Activities are the agent run's activities; their dependencies are the
// fields. Register them with [Register].
type Activities struct {
	Store  *runstore.Store
	Events *Events
	// Gateway calls tools. Give it client.WithRetry(client.RetryPolicy{MaxAttempts: 1}):
	// retries are Temporal's, with the delay the tool asked for.
	Gateway *client.Client
	Models  Models
	// InlineLimit overrides DefaultInlineLimit.
	InlineLimit int
	// Metrics, when set, records runs, model turns and tool calls.
	Metrics *metrics.Metrics
}

func (a *Activities) inlineLimit() int {
	if a.InlineLimit > 0 {
		return a.InlineLimit
	}
	return DefaultInlineLimit
}

// PrepareRun resolves the run's tools (as the run's principal), stores their
// definitions as one blob and appends the initial messages.
func (a *Activities) PrepareRun(ctx context.Context, in PrepareInput) (PrepareResult, error) {
	defer toolcall.Heartbeat(ctx)()
	defs, err := a.resolveTools(toolcall.OnBehalfOf(ctx, in.Principal), in.Spec)
	if err != nil {
		return PrepareResult{}, err
	}
	// The model sees the tools, or in code mode run_program and a prompt
	// section with the tools as stubs; the workflow keeps the tools' summaries.
	offered, section := defs, ""
	if in.Spec.CodeMode {
		if section, err = program.PromptFor(defs); err != nil {
			return PrepareResult{}, temporal.NewNonRetryableApplicationError("code mode: "+err.Error(), toolcall.ErrTypeConfig, nil)
		}
		offered = []*toolfleetv1.ToolDefinition{runProgramDefinition()}
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(&toolfleetv1.ListToolsResponse{Tools: offered})
	if err != nil {
		return PrepareResult{}, fmt.Errorf("agent: encode tools: %w", err)
	}
	ref, err := a.Store.PutBlob(ctx, in.RunID, b)
	if err != nil {
		return PrepareResult{}, err
	}
	res := PrepareResult{ToolsRef: ref}
	for _, d := range defs {
		res.Tools = append(res.Tools, toolcall.ToolOf(d))
	}
	// A run id used before (a conversation continued after its workflow
	// closed) keeps its transcript and its turn numbers, so call ids stay unique.
	existing, err := a.Store.Load(ctx, in.RunID, -1)
	if err != nil {
		return PrepareResult{}, err
	}
	res.Seq = len(existing)
	for _, m := range existing {
		if m.GetRole() == toolfleetv1.Role_ROLE_ASSISTANT {
			res.Turn++
		}
	}
	if in.InputRef == "" {
		return res, nil
	}
	msgs, err := a.Store.Messages(ctx, in.InputRef)
	if err != nil {
		return PrepareResult{}, err
	}
	if section != "" {
		// A new transcript (or the one an earlier attempt started) opens with the section.
		if first := withProgramPrompt(msgs, section); len(existing) == 0 || (len(existing) == len(first) && hasTail(existing, first)) {
			msgs = first
		}
	}
	if hasTail(existing, msgs) {
		res.Seq -= len(msgs) // an earlier attempt appended them already
	}
	if err := a.Store.Append(ctx, in.RunID, res.Seq, msgs...); err != nil {
		return PrepareResult{}, err
	}
	res.Seq += len(msgs)
	return res, nil
}

// hasTail reports whether msgs are the last messages of all.
func hasTail(all, msgs []*toolfleetv1.Message) bool {
	if len(msgs) == 0 || len(msgs) > len(all) {
		return false
	}
	tail := all[len(all)-len(msgs):]
	for i := range msgs {
		if !proto.Equal(tail[i], msgs[i]) {
			return false
		}
	}
	return true
}

// resolveTools selects the run's tools by the one rule runs and programs
// share (toolcall.Resolve): its patterns, then up to toolSearchLimit search
// results, at most maxTools in all.
func (a *Activities) resolveTools(ctx context.Context, spec RunSpec) ([]*toolfleetv1.ToolDefinition, error) {
	return toolcall.Resolve(ctx, a.Gateway, toolcall.Selection{Patterns: spec.Tools, Search: spec.ToolSearch,
		SearchLimit: toolSearchLimit, Max: maxTools})
}

// tools reads the definitions stored by PrepareRun.
func (a *Activities) tools(ctx context.Context, ref string) ([]*toolfleetv1.ToolDefinition, error) {
	if ref == "" {
		return nil, nil
	}
	b, err := a.Store.Blob(ctx, ref)
	if err != nil {
		return nil, err
	}
	resp := &toolfleetv1.ListToolsResponse{}
	if err := proto.Unmarshal(b, resp); err != nil {
		return nil, fmt.Errorf("agent: decode tools: %w", err)
	}
	return resp.GetTools(), nil
}

// AppendInput appends the messages of a blob (SendMessage) and returns how many.
func (a *Activities) AppendInput(ctx context.Context, in AppendInput) (int, error) {
	defer toolcall.Heartbeat(ctx)()
	msgs, err := a.Store.Messages(ctx, in.Ref)
	if err != nil {
		return 0, err
	}
	return len(msgs), a.Store.Append(ctx, in.RunID, in.Seq, msgs...)
}

// PublishEvent publishes one run event (deduplicated by its id): the one
// event activity (toolcall.PublishEvent). The event that ends a run counts
// it once: a retry whose event the stream already has is not counted again.
func (a *Activities) PublishEvent(ctx context.Context, ev toolcall.Event) error {
	return toolcall.PublishEvent(ctx, a.Events, ev, func(ev toolcall.Event) { a.Metrics.RunFinished(endStatus(ev)) })
}

// endStatus is the status of a run that ev ends, or "" when ev ends none.
func endStatus(ev toolcall.Event) string {
	switch ev.Kind {
	case toolcall.EventCompleted:
		return StatusCompleted
	case toolcall.EventCancelled:
		return StatusCanceled
	case toolcall.EventFailed:
		// finish writes "<status>: <reason>".
		if strings.HasPrefix(ev.Message, StatusBudgetExhausted+":") {
			return StatusBudgetExhausted
		}
		return StatusFailed
	}
	return ""
}

const (
	// maxLoggedModelError bounds the provider's error message in the log.
	maxLoggedModelError = 512
	// maxModelError bounds the text of another model error in a run.
	maxModelError = 400
)
