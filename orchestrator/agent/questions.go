package agent

import (
	"context"
	"fmt"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/workflow"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/orchestrator/ids"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall"
)

// A tool's questions in a run (toolcall.Desk): the call activity hands a
// round of questions back, the run keeps them pending (status
// WAITING_INPUT, GetRun's Questions, input.requested events) until a person
// answers each with the AnswerInput Update, then calls the tool again with
// the answers under the same call id. A run whose spec declines questions
// never declares client input, and a tool that asks anyway gets an error
// result saying so. A call waiting for its principal to connect an account
// (toolcall/connect.go) is a round of one item on the same desk.
//
// No workflow.GetVersion is needed: the loop runs only when an activity
// result carries Asked, which no history recorded before it holds.

// declinedText is the result the model reads when the run takes no questions.
const declinedText = "The tool needed input from a person (it asked a question), and this run does not take questions " +
	"(its questions policy is decline); call another tool or answer without it."

// askPeople sets the client input of a run's call from in.
func askPeople(c *toolcall.Call, in CallToolInput) {
	c.Declined = declinedText
	if !in.AskPeople {
		return
	}
	c.ClientInput = []toolfleetv1.ClientCapability{toolfleetv1.ClientCapability_CLIENT_CAPABILITY_ELICITATION}
	c.RequestState = in.RequestState
	if responses, err := toolcall.Responses(in.Answers); err == nil {
		c.Answers = responses
	}
}

// Ask hands the tool's round of questions back to the workflow: nothing is
// appended to the transcript.
func (e runCalls) Ask(_ context.Context, _ CallToolInput, _ toolcall.Call, o toolcall.Outcome) (CallToolResult, error) {
	return CallToolResult{Kind: toolcall.KindInput, Asked: o.Asked, Duration: o.Duration}, nil
}

// asksPeople reports whether the run's tools may ask its people.
func (r *run) asksPeople() bool { return r.in.Spec.Questions != QuestionsDecline }

// answerRounds runs the rounds of questions of the call of in whose first
// result is *res: each round waits for the answers (as long as an approval
// would, within the run's deadline), then the call is made again with them
// on actx. It ends with the call's result in *res.
func (r *run) answerRounds(ctx, actx workflow.Context, in CallToolInput, res *CallToolResult) error {
	for round := 0; res.Asked != nil; round++ {
		asked := res.Asked
		in.Answers, in.RequestState, in.Unanswered = nil, "", ""
		if round >= toolcall.MaxInputRounds {
			in.Unanswered = fmt.Sprintf("The tool asked more than %d rounds of questions; the call was stopped.", toolcall.MaxInputRounds)
		} else {
			answers, unanswered, err := r.ask(ctx, in, asked)
			if err != nil {
				return err
			}
			in.Answers, in.RequestState = answers, asked.State
			switch {
			case unanswered != "" && asked.Connect() != "":
				in.Unanswered = "The tool cannot act: " + unanswered + ". Call another tool or answer without it."
			case unanswered != "":
				in.Unanswered = "The tool's question was not answered: " + unanswered + "."
			}
		}
		*res = CallToolResult{}
		if err := toolcall.Await(ctx, workflow.ExecuteActivity(actx, CallToolActivity, in), relaunchOn(actx), CallToolActivity, in, res); err != nil {
			return err
		}
	}
	return nil
}

// ask keeps one round pending until it is answered, or the run's approval
// timeout passes.
func (r *run) ask(ctx workflow.Context, in CallToolInput, asked *toolcall.Asked) (map[string]string, string, error) {
	callID := ids.RunCall(in.RunID, in.Turn, in.Index)
	toolID := ""
	if in.Tool != nil {
		toolID = in.Tool.ID
	}
	// The run's deadline cancels ctx, which ends the wait (finish then
	// says "deadline").
	wait := orDefault(r.in.Spec.Approval.Timeout, DefaultApprovalTimeout)
	return r.desk.Ask(ctx, toolcall.Asking{CallID: callID, ToolID: toolID, Asked: asked, Wait: wait,
		Announce: func(ctx workflow.Context, kind, key, msg string) {
			r.publish(ctx, kind, in.Turn, callID, toolID, key+": "+msg, fmt.Sprintf("%s/%s/%s/%d", callID, kind, key, workflow.Now(ctx).UnixNano()))
		},
		Waiting: func(waiting bool) {
			r.st.Status = StatusRunning
			if waiting {
				r.st.Status = StatusWaitingInput
			}
		},
	})
}

// AnswerQuestion answers a tool's question pending in the run (the AnswerInput
// Update; its validator refuses a reply that does not fit the question).
func (r *Runs) AnswerQuestion(ctx context.Context, runID string, reply toolcall.Reply) error {
	h, err := r.Temporal.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: runID, UpdateName: UpdateAnswerInput,
		Args: []any{reply}, WaitForStage: client.WorkflowUpdateStageCompleted})
	if err != nil {
		return fmt.Errorf("agent: answer %s %s: %w", reply.CallID, reply.Key, err)
	}
	return h.Get(ctx, nil)
}
