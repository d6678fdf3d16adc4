package program

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/orchestrator/ids"
	"github.com/toolfleet/toolfleet/orchestrator/metrics"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall"
	"github.com/toolfleet/toolfleet/sdk/client"
)

// Gateway is the part of the gateway client the activities use;
// *client.Client implements it. Calls run as the program's principal through
// the delegation metadata (see onBehalfOf).
type Gateway interface {
	Tools(ctx context.Context, req *toolfleetv1.ListToolsRequest) ([]*toolfleetv1.ToolDefinition, error)
	GetTool(ctx context.Context, toolID string) (*toolfleetv1.ToolDefinition, error)
	CallTool(ctx context.Context, req *toolfleetv1.CallToolRequest) (*client.Result, error)
}

// Activities are the program's activities; register them with
// RegisterActivities. Gateway must be built without client-side retries
// (client.WithRetry(client.RetryPolicy{MaxAttempts: 1})): Temporal retries.
type Activities struct {
	Gateway Gateway
	Events  toolcall.EventPublisher
	// Metrics, when set, records tool calls and how programs end.
	Metrics *metrics.Metrics
	// Quota, when set, refuses a call of a program whose values are over
	// its owner's quota or the shared store's room (valuequota.go).
	Quota ValueQuota
}

// ResolveRequest is ResolveProgramTools' input.
type ResolveRequest struct {
	Patterns  []string           `json:"patterns"`
	Principal toolcall.Principal `json:"principal"`
}

// maxTools bounds the tools one program may be given.
const maxTools = 200

// ResolveProgramTools turns tool ids and globs into the tools a program may call, as
// the program's principal sees them.
func (a *Activities) ResolveProgramTools(ctx context.Context, req ResolveRequest) ([]Tool, error) {
	defer toolcall.Heartbeat(ctx)()
	ctx = toolcall.OnBehalfOf(ctx, req.Principal)
	seen := map[string]bool{}
	var out []Tool
	for _, p := range req.Patterns {
		var defs []*toolfleetv1.ToolDefinition
		// An exact name (a version or none) is asked for as one tool, as a
		// run's tools are: a gateway that is still loading its workers
		// answers UNAVAILABLE (retried), where a listing would match nothing
		// (and the program would fail on "no tool matches").
		if strings.Contains(p, "@") || !strings.ContainsAny(p, "*?[") {
			d, err := a.Gateway.GetTool(ctx, p)
			if err != nil {
				return nil, toolcall.Refusal(fmt.Sprintf("tool %q", p), err)
			}
			defs = []*toolfleetv1.ToolDefinition{d}
		} else {
			var err error
			if defs, err = a.Gateway.Tools(ctx, &toolfleetv1.ListToolsRequest{Filter: p}); err != nil {
				return nil, toolcall.Refusal(fmt.Sprintf("tools %q", p), err)
			}
		}
		if len(defs) == 0 {
			return nil, temporal.NewNonRetryableApplicationError(fmt.Sprintf("no tool matches %q", p), "UnknownTool", nil)
		}
		for _, d := range defs {
			if seen[d.GetId()] {
				continue
			}
			seen[d.GetId()] = true
			t, err := ToolOf(d)
			if err != nil {
				return nil, temporal.NewNonRetryableApplicationError(err.Error(), "BadContract", nil)
			}
			out = append(out, t)
		}
		if len(out) > maxTools {
			return nil, temporal.NewNonRetryableApplicationError(fmt.Sprintf("more than %d tools match %q", maxTools, req.Patterns), "TooManyTools", nil)
		}
	}
	slices.SortFunc(out, func(a, b Tool) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// ToolOf is what a program needs to know of a tool definition.
func ToolOf(d *toolfleetv1.ToolDefinition) (Tool, error) {
	t := Tool{Tool: toolcall.ToolOf(d), Name: d.GetToolkit() + "." + d.GetName(), Description: d.GetDescription()}
	if s := d.GetInputSchema(); s != nil {
		b, err := protojson.Marshal(s)
		if err != nil {
			return t, fmt.Errorf("tool %s: input schema: %w", t.ID, err)
		}
		t.InputSchema = string(b)
	}
	return t, nil
}

// ProgramCallTool calls one tool through the gateway as the program's
// principal: the one call activity (toolcall.CallActivity) with the
// program's engine. The call id makes it idempotent: a retry returns the
// stored outcome. A retryable execution error becomes a Temporal retry after
// the tool's retry_after; other outcomes are returned for the script to
// handle.
func (a *Activities) ProgramCallTool(ctx context.Context, req CallRequest) (*CallResult, error) {
	return toolcall.CallActivity[CallRequest, *CallResult](a.Gateway, programCalls{a})(ctx, req)
}

// programCalls is the call activity's engine of programs: the call and its
// result travel in history.
type programCalls struct{ a *Activities }

// Prepare decodes the call's input; a call of a program whose values are
// over its quota is refused before anything is published (valuequota.go).
func (e programCalls) Prepare(ctx context.Context, req CallRequest) (toolcall.Call, **CallResult, error) {
	in := &structpb.Struct{}
	if err := protojson.Unmarshal([]byte(req.InputJSON), in); err != nil {
		return toolcall.Call{}, nil, temporal.NewNonRetryableApplicationError("the input is not a JSON object", toolcall.ErrTypeInput, err)
	}
	id := ids.ProgramOf(req.CallID)
	if refused, err := e.a.checkValues(ctx, id); refused != nil || err != nil {
		return toolcall.Call{}, &refused, err
	}
	c := toolcall.Call{RunID: id, CallID: req.CallID, ToolID: req.ToolID, Input: in, Principal: req.Principal,
		Approver: req.Approver, Announce: req.InputJSON}
	askPeople(&c, req)
	return c, nil, nil
}

// Render renders the outcome as what the script sees. Every attempt that
// renders counts it (at least once: an attempt whose completion Temporal
// lost is retried, and the gateway answers the retry from its idempotency
// store).
func (e programCalls) Render(_ context.Context, req CallRequest, _ toolcall.Call, o toolcall.Outcome) (toolcall.Rendered[*CallResult], error) {
	out, err := callResultOf(o, req.MaxValueBytes)
	if err != nil {
		return toolcall.Rendered[*CallResult]{}, err
	}
	msg := "ok"
	if out.Error != nil {
		msg = string(out.Error.Kind) + ": " + out.Error.Message
	}
	return toolcall.Rendered[*CallResult]{Out: out, Kind: outcomeOf(out), Counted: true, Message: msg}, nil
}

// Publish publishes an event of the call; its loss is logged, never fails
// the call.
func (e programCalls) Publish(ctx context.Context, ev toolcall.Event) error {
	e.a.publish(ctx, ev)
	return nil
}

func (e programCalls) GatewayCall(d time.Duration) { e.a.Metrics.ProgramGatewayCall(d) }
func (e programCalls) ToolCall(k toolcall.Kind)    { e.a.Metrics.ProgramToolCall(string(k)) }

// callResultOf renders a gateway outcome as what the script sees, or as an
// activity error Temporal retries (toolcall.Outcome.ActivityError).
func callResultOf(o toolcall.Outcome, maxValue int) (*CallResult, error) {
	switch o.Kind {
	case toolcall.KindValidation:
		return &CallResult{Error: &CallError{Kind: toolcall.KindValidation, Message: o.Message, Fields: o.Fields}}, nil
	case toolcall.KindRefused:
		return &CallResult{Error: &CallError{Kind: toolcall.KindRefused.ForProgram(), Message: o.Message}}, nil
	case toolcall.KindExecution:
		return &CallResult{Error: &CallError{Kind: toolcall.KindExecution, Message: o.Message}}, nil
	case toolcall.KindOK:
	default:
		return nil, o.ActivityError()
	}
	b, err := protojson.Marshal(o.Value)
	if err != nil {
		return nil, temporal.NewNonRetryableApplicationError("the tool's result cannot be encoded", "BadResult", err)
	}
	if maxValue > 0 && len(b) > maxValue {
		return &CallResult{Error: &CallError{Kind: toolcall.KindTooLarge, Message: fmt.Sprintf("the result is %d bytes, over %d", len(b), maxValue)}}, nil
	}
	return &CallResult{OK: true, ValueJSON: string(b)}, nil
}

// outcomeOf is a call's outcome label: "ok" or its error kind.
func outcomeOf(r *CallResult) toolcall.Kind {
	if r.Error != nil {
		return r.Error.Kind
	}
	return toolcall.KindOK
}

// PublishProgramEvent publishes one program event: the one event activity
// (toolcall.PublishEvent). The event that ends a program counts it in the
// metrics.
func (a *Activities) PublishProgramEvent(ctx context.Context, ev toolcall.Event) error {
	err := toolcall.PublishEvent(ctx, a.Events, ev, func(ev toolcall.Event) {
		a.Metrics.ProgramFinished(endStatus(ev.Kind), limitLabel(ev.Limit))
	})
	if err != nil {
		return fmt.Errorf("program: %w", err)
	}
	return nil
}

// endStatus is the status of a program that an event of kind ends, or "".
func endStatus(kind string) string {
	switch kind {
	case toolcall.EventCompleted:
		return StatusCompleted
	case toolcall.EventFailed:
		return StatusFailed
	case toolcall.EventCancelled:
		return StatusCanceled
	}
	return ""
}

// limitLabel keeps the limit label to the known limits.
func limitLabel(limit string) string {
	switch limit {
	case "", LimitSteps, LimitToolCalls, LimitWidth, LimitDeadline, LimitValue, LimitResult, LimitMemory, LimitParallel, LimitStorage:
		return limit
	}
	return metrics.Other
}

// publish sends an event from inside an activity; its loss is logged, never
// fails the call.
func (a *Activities) publish(ctx context.Context, ev toolcall.Event) {
	if a.Events == nil {
		return
	}
	ev.Time = time.Now()
	if len(ev.Message) > MaxPrintBytes {
		ev.Message = ev.Message[:MaxPrintBytes] + "…"
	}
	if err := a.Events.Publish(ctx, ev); err != nil {
		activity.GetLogger(ctx).Warn("program event not published", "kind", ev.Kind, "call_id", ev.CallID, "error", err)
	}
}
