package agentapi

import (
	"context"
	"fmt"

	"connectrpc.com/connect"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/orchestrator/agent"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall/apibase"
)

// questionPolicy reads StartRunRequest.questions.
func questionPolicy(p toolfleetv1.QuestionPolicy) (string, error) {
	switch p {
	case toolfleetv1.QuestionPolicy_QUESTION_POLICY_UNSPECIFIED, toolfleetv1.QuestionPolicy_QUESTION_POLICY_ASK:
		return "", nil
	case toolfleetv1.QuestionPolicy_QUESTION_POLICY_DECLINE:
		return agent.QuestionsDecline, nil
	}
	return "", fmt.Errorf("questions %d: want ASK or DECLINE", p)
}

// AnswerInput implements AgentService: the caller (scope runs:approve, the
// run's starter or an admin) answers one question of a call; the answer is
// checked against the question's schema here, for a clear error, and again
// by the run's Update validator.
func (s *Service) AnswerInput(ctx context.Context, r *connect.Request[toolfleetv1.AnswerInputRequest]) (*connect.Response[toolfleetv1.AnswerInputResponse], error) {
	c, err := s.authorize(ctx, r.Header(), ScopeApprove)
	if err != nil {
		return nil, err
	}
	if err := s.own(ctx, c, r.Msg.GetRunId()); err != nil {
		return nil, err
	}
	reply, err := apibase.ReplyOf(r.Msg.GetCallId(), r.Msg.GetKey(), r.Msg.GetAction(), r.Msg.GetContent(), c.Subject)
	if err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	st, err := s.Runs.Get(ctx, r.Msg.GetRunId())
	if err != nil {
		return nil, s.fromTemporal("get run", err)
	}
	q, open, err := apibase.FindQuestion(st.Questions, &reply)
	if err != nil {
		return nil, connect.NewError(connect.CodeFailedPrecondition, err)
	}
	if err := toolcall.CheckReply(q, reply); err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	if err := s.Runs.AnswerQuestion(ctx, r.Msg.GetRunId(), reply); err != nil {
		return nil, s.fromTemporal("answer question", err)
	}
	return connect.NewResponse(&toolfleetv1.AnswerInputResponse{Key: reply.Key, Open: int32(open - 1)}), nil
}
