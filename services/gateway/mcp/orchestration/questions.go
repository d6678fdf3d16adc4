package orchestration

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/services/gateway/mcp"
)

// questions are a run's or program's pending questions as a task's.
func questions(pending []*toolfleetv1.PendingQuestion) []mcp.TaskQuestion {
	var out []mcp.TaskQuestion
	for _, q := range pending {
		out = append(out, mcp.TaskQuestion{CallID: q.GetCallId(), Key: q.GetKey(), Message: q.GetMessage(), Schema: q.GetRequestedSchema(),
			Provider: q.GetConnectProvider(), Scopes: q.GetConnectScopes()})
	}
	return out
}

// questionPolicy says whether a task's tools may ask the MCP client: only a
// client that can answer (mcp.TaskStart.AskPeople) is asked; for any other
// the tool reads that its question was declined.
func questionPolicy(start mcp.TaskStart) toolfleetv1.QuestionPolicy {
	if start.AskPeople {
		return toolfleetv1.QuestionPolicy_QUESTION_POLICY_ASK
	}
	return toolfleetv1.QuestionPolicy_QUESTION_POLICY_DECLINE
}

// AnswerTask answers a tool's question the task's workflow waits for, as
// the MCP caller (AnswerInput or AnswerProgramInput; the service checks the
// scope, the owner and the answer's schema).
func (b *Tasks) AnswerTask(ctx context.Context, id, callID, key, action string, content map[string]any) error {
	kind, _, ok := parseTaskID(id)
	if !ok {
		return errNoTask
	}
	var body *structpb.Struct
	if content != nil {
		s, err := structpb.NewStruct(content)
		if err != nil {
			return status.Error(codes.InvalidArgument, fmt.Sprintf("content: %v", err))
		}
		body = s
	}
	var err error
	switch kind {
	case kindRun:
		_, err = call(ctx, b.s.Agents, &toolfleetv1.AnswerInputRequest{RunId: id, CallId: callID, Key: key, Action: action, Content: body}, Agents.AnswerInput)
	default:
		_, err = call(ctx, b.s.Programs, &toolfleetv1.AnswerProgramInputRequest{ProgramId: id, CallId: callID, Key: key, Action: action, Content: body}, Programs.AnswerProgramInput)
	}
	return err
}
