package programapi

import (
	"context"
	"fmt"

	"connectrpc.com/connect"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall/apibase"
)

// asksPeople reads RunProgramRequest.questions: a program takes questions
// unless its start declines them.
func asksPeople(p toolfleetv1.QuestionPolicy) (bool, error) {
	switch p {
	case toolfleetv1.QuestionPolicy_QUESTION_POLICY_UNSPECIFIED, toolfleetv1.QuestionPolicy_QUESTION_POLICY_ASK:
		return true, nil
	case toolfleetv1.QuestionPolicy_QUESTION_POLICY_DECLINE:
		return false, nil
	}
	return false, fmt.Errorf("questions %d: want ASK or DECLINE", p)
}

// AnswerProgramInput implements ProgramService: the caller (scope
// programs:approve, the program's owner or an admin) answers one question
// of a call; the answer is checked against the question's schema here, for
// a clear error, and again by the program's Update validator.
func (s *Service) AnswerProgramInput(ctx context.Context, req *connect.Request[toolfleetv1.AnswerProgramInputRequest]) (*connect.Response[toolfleetv1.AnswerProgramInputResponse], error) {
	m := req.Msg
	c, err := s.own(ctx, req.Header(), ScopeApprove, m.GetProgramId())
	if err != nil {
		return nil, err
	}
	reply, err := apibase.ReplyOf(m.GetCallId(), m.GetKey(), m.GetAction(), m.GetContent(), c.Subject)
	if err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	st, err := s.Programs.Get(ctx, m.GetProgramId())
	if err != nil {
		return nil, lookupError(err)
	}
	var pending []toolcall.Question
	if st.State != nil {
		pending = st.State.Questions
	}
	q, open, err := apibase.FindQuestion(pending, &reply)
	if err != nil {
		return nil, connect.NewError(connect.CodeFailedPrecondition, err)
	}
	if err := toolcall.CheckReply(q, reply); err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	if err := s.Programs.AnswerQuestion(ctx, m.GetProgramId(), reply); err != nil {
		// The validator's refusal (answered meanwhile, or the call moved on).
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("the question %q of call %q is no longer waiting for an answer", reply.Key, reply.CallID))
	}
	return connect.NewResponse(&toolfleetv1.AnswerProgramInputResponse{Key: reply.Key, Open: int32(open - 1)}), nil
}
