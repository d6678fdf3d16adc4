package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// answerQuestions passes the answers of tasks/update to the tools' questions
// the task waits on (keys from TaskQuestion.inputKey; others are left to the
// approvals or ignored, as the extension says). Each must be an MCP
// ElicitResult; the backend checks its content against the question's
// schema, and a refusal is invalid params with the backend's words.
func (s *Server) answerQuestions(ctx context.Context, tb Tasks, id string, qs []TaskQuestion, answers map[string]json.RawMessage) *jsonrpc.Error {
	keys := make([]string, 0, len(qs))
	byKey := make(map[string]TaskQuestion, len(qs))
	for _, q := range qs {
		if _, ok := answers[q.inputKey()]; ok {
			keys = append(keys, q.inputKey())
			byKey[q.inputKey()] = q
		}
	}
	sort.Strings(keys) // one order, whatever the map's
	for _, key := range keys {
		q := byKey[key]
		var er struct {
			Action  *string        `json:"action"`
			Content map[string]any `json:"content"`
		}
		if err := json.Unmarshal(answers[key], &er); err != nil || er.Action == nil {
			return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("inputResponses[%q] must be an elicitation result", key)}
		}
		if err := tb.AnswerTask(ctx, id, q.CallID, q.Key, *er.Action, er.Content); err != nil {
			return taskAnswerError(ctx, key, err)
		}
	}
	return nil
}

// taskAnswerError renders the backend's refusal of an answer: an answer that
// does not fit (or a question no longer waiting) is invalid params saying
// why; an unknown task as tasks/get says it.
func taskAnswerError(ctx context.Context, key string, err error) *jsonrpc.Error {
	switch status.Code(err) {
	case codes.InvalidArgument, codes.FailedPrecondition:
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("inputResponses[%q]: %s", key, status.Convert(err).Message())}
	}
	return taskLookupError(ctx, err)
}
