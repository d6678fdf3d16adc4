package toolcall

import (
	"context"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/client"
)

// Gateway is the part of the gateway client the call activity uses;
// *client.Client implements it. Build it without client-side retries
// (client.WithRetry(client.RetryPolicy{MaxAttempts: 1})): Temporal retries.
type Gateway interface {
	CallTool(ctx context.Context, req *toolfleetv1.CallToolRequest) (*client.Result, error)
}

// Call is one tool call as the call activity makes it.
type Call struct {
	// RunID is the run or program whose events the call publishes; Turn
	// places a run's call (0 for programs).
	RunID string
	Turn  int
	// CallID is the gateway's idempotency key: a retried attempt or a
	// replay never repeats the call's side effect.
	CallID, ToolID string
	Input          *structpb.Struct
	// Principal is whom the call runs as ([OnBehalfOf]); Approver, when
	// set, marks it approved ([WithApproval]).
	Principal Principal
	Approver  string
	// Announce is the message of the tool_call event (a program's input).
	Announce string
	// Origin is the model's call a run's result answers (nil for programs).
	Origin *toolfleetv1.ToolCall
	// Final asks for a retryable outcome ([KindRetry]) to be rendered instead
	// of retried: the run's last attempt. Programs leave every retry to
	// Temporal and render what is left when the retries are spent.
	Final bool
	// Decided, when set, is the call's outcome decided without the gateway
	// (a denial, an unknown tool, a finished program): nothing is called or
	// announced, and the outcome is rendered and published as a result.
	Decided *Outcome
	// ClientInput are the kinds of input the workflow's people answer
	// (none: the gateway refuses a tool that needs input before it runs).
	// Answers and RequestState answer the round before (same call id).
	ClientInput  []toolfleetv1.ClientCapability
	Answers      map[string]*structpb.Struct
	RequestState string
	// Declined is the execution error a tool's question gets when the
	// engine cannot take it (no [Asker], or the workflow declines questions).
	Declined string
}

// Rendered is an outcome as an engine keeps it.
type Rendered[Out any] struct {
	Out Out
	// Asked: Out hands a round of questions back ([Asker]); nothing is
	// counted or published as a result.
	Asked bool
	// Kind is the outcome counted in the metrics, when Counted (false: an
	// earlier attempt of the call counted it already).
	Kind    Kind
	Counted bool
	// Message is the tool_result event's message.
	Message string
}

// An Engine is what the call activity needs of the workflows whose calls it
// makes: agent runs keep calls and results in their transcript, programs
// carry them in history. The activity's input and result (In, Out) are the
// engine's own, so histories recorded before the one activity replay.
type Engine[In, Out any] interface {
	// Prepare reads the call of in. done, when set, is the result as it is
	// (an earlier attempt made it, or the call is refused before anything
	// is published): nothing more happens.
	Prepare(ctx context.Context, in In) (c Call, done *Out, err error)
	// Render renders and keeps o, the call's outcome.
	Render(ctx context.Context, in In, c Call, o Outcome) (Rendered[Out], error)
	// Publish publishes an event of the call; an error fails the attempt.
	Publish(ctx context.Context, ev Event) error
	// GatewayCall and ToolCall record the engine's metrics.
	GatewayCall(d time.Duration)
	ToolCall(k Kind)
}

// An Asker is an Engine whose workflows take a tool's questions: Ask
// returns the round (o.Asked) to the workflow, which keeps it as pending
// input and calls again with the answers. Nothing is appended or kept.
type Asker[In, Out any] interface {
	Ask(ctx context.Context, in In, c Call, o Outcome) (Out, error)
}

// DeclinedDefault is [Call.Declined] when the engine sets none.
const DeclinedDefault = "the tool needed input from a person, which this caller does not give"

// CallActivity is the one call activity of runs and programs; each
// registers it under its own name ("CallTool", "ProgramCallTool"), with its
// own input and result. The steps: prepare the call; announce it
// (tool_call) and call the gateway as the workflow's principal, approved
// when it was, with heartbeats; classify the outcome ([Classify]) — a
// retryable one fails the attempt for Temporal to retry unless it is
// final, [KindConfig] fails it for good —; render and keep it; count it;
// publish the result (tool_result).
func CallActivity[In, Out any](gw Gateway, e Engine[In, Out]) func(context.Context, In) (Out, error) {
	return func(ctx context.Context, in In) (Out, error) {
		var zero Out
		c, done, err := e.Prepare(ctx, in)
		if err != nil {
			return zero, err
		}
		if done != nil {
			return *done, nil
		}
		var r Rendered[Out]
		if c.Decided != nil {
			r, err = e.Render(ctx, in, c, *c.Decided)
		} else {
			r, err = call(ctx, gw, e, in, c)
		}
		if err != nil {
			return zero, err
		}
		if r.Asked {
			return r.Out, nil
		}
		if r.Counted {
			e.ToolCall(r.Kind)
		}
		if err := e.Publish(ctx, Event{RunID: c.RunID, Kind: EventToolResult, Turn: c.Turn, CallID: c.CallID,
			ToolID: c.ToolID, ID: c.CallID + "/result", Time: time.Now(), Message: r.Message}); err != nil {
			return zero, err
		}
		return r.Out, nil
	}
}

// call announces c, calls the gateway and renders the outcome.
func call[In, Out any](ctx context.Context, gw Gateway, e Engine[In, Out], in In, c Call) (Rendered[Out], error) {
	if err := e.Publish(ctx, Event{RunID: c.RunID, Kind: EventToolCall, Turn: c.Turn, CallID: c.CallID,
		ToolID: c.ToolID, ID: c.CallID + "/call", Time: time.Now(), Message: c.Announce}); err != nil {
		return Rendered[Out]{}, err
	}
	defer Heartbeat(ctx)()
	req := WithApproval(&toolfleetv1.CallToolRequest{CallId: c.CallID, ToolId: c.ToolID, Input: c.Input,
		ClientInput: c.ClientInput, InputResponses: c.Answers, RequestState: c.RequestState}, c.Approver)
	began := time.Now()
	res, err := gw.CallTool(OnBehalfOf(ctx, c.Principal), req)
	e.GatewayCall(time.Since(began))
	o, err := Classify(ctx, res, err)
	if err != nil {
		return Rendered[Out]{}, err
	}
	if o.Kind == KindConfig || (o.Kind == KindRetry && !c.Final) {
		return Rendered[Out]{}, o.ActivityError()
	}
	if o.Kind == KindInput {
		if a, ok := any(e).(Asker[In, Out]); ok && len(c.ClientInput) > 0 {
			out, err := a.Ask(ctx, in, c, o)
			return Rendered[Out]{Out: out, Asked: true}, err
		}
		if provider := o.Asked.Connect(); provider != "" {
			// Nobody of this caller connects accounts: the gateway's refusal,
			// with the way out for the person who reads it.
			o.Kind, o.Message, o.Asked = KindRefused, "the tool acts with the user's "+provider+
				" account, which is not connected (toolfleet connections connect "+provider+"); this caller does not wait for people", nil
			return e.Render(ctx, in, c, o)
		}
		o.Kind, o.Message, o.Asked = KindExecution, c.Declined, nil
		if o.Message == "" {
			o.Message = DeclinedDefault
		}
	}
	return e.Render(ctx, in, c, o)
}
