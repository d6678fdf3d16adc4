package program

import (
	"context"
	"errors"
	"fmt"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/workflow"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall"
)

// A tool's questions in a program, as in a run (toolcall.Desk; see
// orchestrator/agent/questions.go): a program started with AskPeople keeps
// a question pending (WAITING_INPUT, State.Questions, input.requested)
// until the AnswerProgramInput Update answers it, then calls the tool again
// under the same call id with the answers. A call waiting for the
// program's principal to connect an account (toolcall/connect.go) waits the
// same way. The wait is the program's
// approval wait, within its deadline. The loop runs only when an activity
// result carries Asked, which no history recorded before it holds.

// declinedText is the error a script reads when its program takes no questions.
const declinedText = "the tool needed input from a person (it asked a question), and this program does not take questions"

// askPeople sets the client input of a program's call from req.
func askPeople(c *toolcall.Call, req CallRequest) {
	c.Declined = declinedText
	if req.Unanswered != "" {
		c.Decided = &toolcall.Outcome{Kind: toolcall.KindExecution, Message: req.Unanswered}
		return
	}
	if !req.AskPeople {
		return
	}
	c.ClientInput = []toolfleetv1.ClientCapability{toolfleetv1.ClientCapability_CLIENT_CAPABILITY_ELICITATION}
	c.RequestState = req.RequestState
	if responses, err := toolcall.Responses(req.Answers); err == nil {
		c.Answers = responses
	}
}

// Ask hands the tool's round of questions back to the workflow.
func (e programCalls) Ask(_ context.Context, _ CallRequest, _ toolcall.Call, o toolcall.Outcome) (*CallResult, error) {
	return &CallResult{Asked: o.Asked}, nil
}

// answerRounds runs the rounds of questions of req's call, whose first
// result is *res, until the call has a result.
func (r *runner) answerRounds(ctx workflow.Context, opts func() workflow.Context, req CallRequest, res *CallResult) error {
	for round := 0; res.Asked != nil; round++ {
		asked := res.Asked
		req.Answers, req.RequestState, req.Unanswered = nil, "", ""
		if round >= toolcall.MaxInputRounds {
			req.Unanswered = fmt.Sprintf("the tool asked more than %d rounds of questions; the call was stopped", toolcall.MaxInputRounds)
		} else {
			answers, unanswered, err := r.desk.Ask(ctx, toolcall.Asking{CallID: req.CallID, ToolID: req.ToolID, Asked: asked,
				Wait: min(r.lim.ApprovalWait, r.dead.Sub(workflow.Now(ctx))), Deadline: r.dead,
				Announce: func(ctx workflow.Context, kind, key, msg string) {
					r.publish(ctx, kind, req.CallID, req.ToolID, key+": "+msg)
				},
				Waiting: func(waiting bool) {
					r.status = StatusRunning
					if waiting {
						r.status = StatusWaitingInput
					}
				},
			})
			switch {
			case errors.Is(err, toolcall.ErrDeadline):
				return r.deadlineError()
			case err != nil:
				r.canceled = true
				return errCanceled
			}
			req.Answers, req.RequestState = answers, asked.State
			switch {
			case unanswered != "" && asked.Connect() != "":
				req.Unanswered = unanswered
			case unanswered != "":
				req.Unanswered = "the tool's question was not answered: " + unanswered
			}
		}
		*res = CallResult{}
		if err := toolcall.Await(ctx, workflow.ExecuteActivity(opts(), CallToolActivity, req), opts, CallToolActivity, req, res); err != nil {
			return err
		}
	}
	return nil
}

// AnswerQuestion answers a tool's question pending in the program (the
// AnswerProgramInput Update; its validator refuses a reply that does not
// fit the question).
func (p *Programs) AnswerQuestion(ctx context.Context, id string, reply toolcall.Reply) error {
	h, err := p.Temporal.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: id, UpdateName: UpdateAnswerInput,
		Args: []any{reply}, WaitForStage: client.WorkflowUpdateStageCompleted})
	if err != nil {
		return fmt.Errorf("program: answer %s %s: %w", reply.CallID, reply.Key, err)
	}
	return h.Get(ctx, nil)
}
